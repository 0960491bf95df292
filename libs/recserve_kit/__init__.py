"""The shared service kit: the one way every recserve service starts, reads its
config, logs, reports health, traces and maps errors."""
