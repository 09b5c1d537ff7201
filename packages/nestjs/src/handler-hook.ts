import type { CoordinatedMember, StreamMessage } from '@redis-stream-coordinator/core';

/** One handler call of a member, as a hook sees it: which listener, which member, what, and the call itself. */
export interface HandlerCall {
  /** The id of the listener or bean consumer (`StreamListenerRegistry.get(id)`). */
  listenerId: string;
  member: CoordinatedMember;
  /** The entry, or a batch listener's entries. */
  message: StreamMessage | StreamMessage[];
  /** Runs the application's handler (through Nest's pipeline when anything applies to it). */
  run(): unknown;
}

/**
 * @internal What `@redis-stream-coordinator/nestjs/testing` puts around every handler call: it sees
 * each attempt's outcome and can fail an attempt instead of running it. Its result is the call's
 * result, so a hook that throws fails the attempt as a throwing handler would.
 */
export type HandlerHook = (call: HandlerCall) => unknown;
