import type { ArgumentsHost } from '@nestjs/common';

/** What one handler call threw first (a handler, guard, pipe or interceptor of it), once Nest's exception handling saw it. */
export interface ThrownByCall {
  thrown: boolean;
  error: unknown;
}

/** Calls whose exceptions are noted, by the context object the transport passed them (gone with it). */
const watched = new WeakMap<object, ThrownByCall>();

/**
 * The exception a pattern handler threw, before Nest's RPC exception filters answered for it.
 *
 * Nest hands a transport only the filters' answer: `{ status: 'error', message: 'Internal server
 * error' }` for anything but an RpcException. That is what a requester must get (Nest's own
 * transports send the same), but a dead letter must keep what was thrown: its class (for
 * `deadLetter.nonRetryableErrors`), message and stack. Nest has no public seam between a handler
 * and its filters, so the one method every exception of an RPC handler call passes through
 * (`RpcExceptionsHandler.handle`, which runs the filters) is wrapped, once per process: for a call
 * whose arguments hold a context `watchExceptions` registered, it notes the exception, then does
 * exactly what it did. Calls of every other transport are untouched.
 *
 * Returns false when that method is not where Nest has kept it since v5 (a future version moved
 * it): the transport then says so once and dead letters get the filters' answer.
 */
export function installExceptionWatch(): boolean {
  if (installed !== undefined) return installed;
  let handlerClass: { prototype: { handle?: (exception: unknown, host?: ArgumentsHost, ...rest: unknown[]) => unknown } } | undefined;
  try {
    // A file of @nestjs/microservices, not its public surface: required here, guarded, rather than
    // imported at the top, so that the transport still loads if a Nest version moves it.
    handlerClass = require('@nestjs/microservices/exceptions/rpc-exceptions-handler').RpcExceptionsHandler;
  } catch {
    handlerClass = undefined;
  }
  const original = handlerClass?.prototype.handle;
  if (typeof original !== 'function') {
    installed = false;
    return installed;
  }
  handlerClass!.prototype.handle = function handle(this: unknown, exception: unknown, host?: ArgumentsHost, ...rest: unknown[]) {
    for (const arg of host?.getArgs?.() ?? []) {
      const call = arg !== null && typeof arg === 'object' ? watched.get(arg) : undefined;
      if (call && !call.thrown) {
        call.thrown = true;
        call.error = exception;
      }
    }
    return original.call(this, exception, host, ...rest);
  };
  installed = true;
  return installed;
}

let installed: boolean | undefined;

/** Notes what the handler call given `context` throws (see `installExceptionWatch`). */
export function watchExceptions(context: object): ThrownByCall {
  const call: ThrownByCall = { thrown: false, error: undefined };
  watched.set(context, call);
  return call;
}
