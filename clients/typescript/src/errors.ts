// Errors a call raises: one class per kind of failure a caller handles
// differently; a bad request names the field the server refused.
import { Code, ConnectError } from "@connectrpc/connect";

const FIELD = /^([A-Za-z_][A-Za-z0-9_.[\]-]*): ([\s\S]*)$/;

/** Code.InvalidArgument -> "INVALID_ARGUMENT", the names the Python client uses. */
export function statusName(code: Code): string {
  return (Code[code] ?? "UNKNOWN").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

export class RecserveError extends Error {
  constructor(
    readonly code: string,
    readonly detail: string,
  ) {
    super(`${code}: ${detail}`);
    this.name = new.target.name;
  }
}

/** INVALID_ARGUMENT: never retried. `field` as the server named it ("k", "filter.categories"). */
export class InvalidRequestError extends RecserveError {
  readonly field: string | null;
  readonly problem: string;
  constructor(code: string, detail: string) {
    super(code, detail);
    const match = FIELD.exec(detail);
    this.field = match ? match[1] : null;
    this.problem = match ? match[2] : detail;
  }
}

export class NotFoundError extends RecserveError {}
export class UnavailableError extends RecserveError {}
export class DeadlineExceededError extends RecserveError {}
export class RateLimitedError extends RecserveError {}
export class NotAuthorizedError extends RecserveError {}

const BY_CODE: Partial<Record<Code, new (code: string, detail: string) => RecserveError>> = {
  [Code.InvalidArgument]: InvalidRequestError,
  [Code.NotFound]: NotFoundError,
  [Code.Unavailable]: UnavailableError,
  [Code.DeadlineExceeded]: DeadlineExceededError,
  [Code.ResourceExhausted]: RateLimitedError,
  [Code.Unauthenticated]: NotAuthorizedError,
  [Code.PermissionDenied]: NotAuthorizedError,
};

export function fromError(error: unknown): RecserveError {
  const connect = ConnectError.from(error);
  const Kind = BY_CODE[connect.code] ?? RecserveError;
  return new Kind(statusName(connect.code), connect.rawMessage);
}
