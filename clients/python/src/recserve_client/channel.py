"""The one channel a client holds: service config, keepalive, credentials."""

from __future__ import annotations

from typing import Any

import grpc

from recserve_client.options import ClientOptions

VERSION = "0.1.0"
USER_AGENT = f"recserve-client-python/{VERSION}"


def is_loopback(target: str) -> bool:
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    host = target.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    host = host.strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def channel_arguments(options: ClientOptions) -> list[tuple[str, Any]]:
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
    ]
    if options.retry is not None and options.retry.attempt_timeout_s is not None:
        # Turns on perAttemptRecvTimeout in the service config.
        arguments.append(("grpc.experimental.enable_hedging", 1))
    if options.tls is not None and options.tls.server_name:
        arguments.append(("grpc.ssl_target_name_override", options.tls.server_name))
    arguments.extend(options.channel_options)
    return arguments


def credentials(options: ClientOptions) -> grpc.ChannelCredentials | None:
    if options.tls is None:
        return None
    tls = options.tls
    return grpc.ssl_channel_credentials(
        root_certificates=tls.root_certificates,
        private_key=tls.private_key,
        certificate_chain=tls.certificate_chain,
    )


def call_metadata(target: str, options: ClientOptions) -> tuple[tuple[str, str], ...]:
    if options.token is None:
        return ()
    if options.tls is None and not is_loopback(target):
        raise ValueError("token: sent only over TLS or to a loopback address")
    return (("authorization", f"Bearer {options.token}"),)


def open_channel(target: str, options: ClientOptions) -> grpc.Channel:
    creds, arguments = credentials(options), channel_arguments(options)
    if creds is None:
        return grpc.insecure_channel(target, options=arguments)
    return grpc.secure_channel(target, creds, options=arguments)


def open_aio_channel(target: str, options: ClientOptions) -> grpc.aio.Channel:
    creds, arguments = credentials(options), channel_arguments(options)
    if creds is None:
        return grpc.aio.insecure_channel(target, options=arguments)
    return grpc.aio.secure_channel(target, creds, options=arguments)
