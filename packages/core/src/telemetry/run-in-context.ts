import type { Context } from '@opentelemetry/api';
import type { Otel } from './otel-api';

/**
 * `handler(input)` inside `context`; if OpenTelemetry's context manager throws, the handler runs (or
 * has run) once all the same, its own result or throw is what the caller gets, and `failed` hears of
 * the context manager's error.
 */
export function runInContext<I, R>(api: Otel, context: Context, handler: (input: I) => R, input: I, failed: (error: unknown) => void): R {
  // Set once the handler was called (whatever it did): the context manager's own throw is told apart.
  let outcome: { result: R } | { error: unknown } | undefined;
  try {
    api.context.with(context, () => {
      try {
        outcome = { result: handler(input) };
      } catch (error) {
        outcome = { error };
      }
    });
  } catch (error) {
    failed(error);
  }
  // Not called: the context manager threw before the call, or never made it.
  if (outcome === undefined) return handler(input);
  if ('error' in outcome) throw outcome.error;
  return outcome.result;
}
