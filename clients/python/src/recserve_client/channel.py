"""The one channel a client holds: service config, keepalive, credentials.

TLS by default to any address but loopback (the system's CAs, or
RECSERVE_CA_FILE's); a token goes only over TLS or to loopback."""

from __future__ import annotations

from typing import Any

import grpc

from recserve_client.options import ClientOptions, TlsOptions

VERSION = "0.1.0"
USER_AGENT = f"recserve-client-python/{VERSION}"


def is_loopback(target: str) -> bool:
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    host = target.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    host = host.strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def transport_tls(target: str, options: ClientOptions) -> TlsOptions | None:
    """The TLS a channel to ``target`` uses, None for plaintext: the options'
    own, else TLS by default to anything but loopback."""
    if options.tls is not None:
        return options.tls
    if options.plaintext or is_loopback(target):
        return None
    return TlsOptions.default()


def channel_arguments(tls: TlsOptions | None, options: ClientOptions) -> list[tuple[str, Any]]:
    arguments: list[tuple[str, Any]] = [
        ("grpc.service_config", options.service_config()),
        # Ours, not one a DNS TXT record could substitute.
        ("grpc.service_config_disable_resolution", 1),
        ("grpc.enable_retries", 1),
        ("grpc.keepalive_time_ms", int(options.keepalive_time_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(options.keepalive_timeout_s * 1000)),
        # A dead connection is noticed between calls too, not on the next one.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.primary_user_agent", USER_AGENT),
        ("grpc.initial_reconnect_backoff_ms", int(options.reconnect_backoff_s * 1000)),
        ("grpc.min_reconnect_backoff_ms", int(options.reconnect_backoff_s * 1000)),
        ("grpc.max_reconnect_backoff_ms", int(options.max_reconnect_backoff_s * 1000)),
    ]
    if options.retry is not None and options.retry.attempt_timeout_s is not None:
        # Turns on perAttemptRecvTimeout in the service config.
        arguments.append(("grpc.experimental.enable_hedging", 1))
    if tls is not None and tls.server_name:
        arguments.append(("grpc.ssl_target_name_override", tls.server_name))
    arguments.extend(options.channel_options)
    return arguments


def credentials(tls: TlsOptions | None) -> grpc.ChannelCredentials | None:
    if tls is None:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=tls.root_certificates,
        private_key=tls.private_key,
        certificate_chain=tls.certificate_chain,
    )


def call_metadata(target: str, options: ClientOptions) -> tuple[tuple[str, str], ...]:
    if options.token is None:
        return ()
    # Checked before any channel exists: a refused token never leaves.
    if options.tls is None and options.plaintext and not is_loopback(target):
        raise ValueError("token: sent only over TLS or to a loopback address")
    return (("authorization", f"Bearer {options.token}"),)


def open_channel(target: str, options: ClientOptions) -> grpc.Channel:
    tls = transport_tls(target, options)
    creds, arguments = credentials(tls), channel_arguments(tls, options)
    if creds is None:
        return grpc.insecure_channel(target, options=arguments)
    return grpc.secure_channel(target, creds, options=arguments)


def open_aio_channel(target: str, options: ClientOptions) -> grpc.aio.Channel:
    tls = transport_tls(target, options)
    creds, arguments = credentials(tls), channel_arguments(tls, options)
    if creds is None:
        return grpc.aio.insecure_channel(target, options=arguments)
    return grpc.aio.secure_channel(target, creds, options=arguments)


def channel_state(channel: grpc.Channel) -> grpc.ChannelConnectivity | None:
    """A blocking channel's state, asked once; None where this gRPC cannot
    say. Its public way, ``subscribe``, polls from a thread of its own that
    raises "Channel closed!" when the channel closes under it."""
    try:
        from grpc._common import CYGRPC_CONNECTIVITY_STATE_TO_CHANNEL_CONNECTIVITY as states

        return states[channel._channel.check_connectivity_state(False)]  # type: ignore[attr-defined]
    except (ImportError, AttributeError, KeyError, ValueError):
        return None
