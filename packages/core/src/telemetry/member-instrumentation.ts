import type { EventEmitter } from 'node:events';
import type { StreamMessage } from '../protocol/entry-format';

/**
 * The member's side of its telemetry (MemberTelemetry), in types that name nothing of
 * `@opentelemetry/api`. That package is an optional peer dependency, and these are the types the
 * member's public options declare: an application without it compiles against our declarations
 * with `skipLibCheck: false` only if no declaration it reaches imports it.
 */
export interface MemberInstrumentation {
  /** The member starts working: instruments are taken, poller events counted, gauges observed until `detach()`. */
  attach(target: TelemetryTarget): void;
  detach(): void;
  /** One handler call; undefined when neither metrics nor tracing is on. */
  startHandler(message: StreamMessage, attempt: number): HandlerCallProbe | undefined;
  /** One batch handler call; undefined when neither metrics nor tracing is on. */
  startBatch(messages: readonly StreamMessage[], shardIndex: number, firstCall: boolean): BatchCallProbe | undefined;
  /** An entry is tried again. */
  retried(): void;
}

/** A handler call being measured and traced. */
export interface HandlerCallProbe {
  /** Calls the handler inside the call's span context. */
  run<R>(handler: (message: StreamMessage) => R, message: StreamMessage): R;
  /** The call settled; `error` when it threw or rejected. Never throws. */
  end(failed: boolean, error?: unknown): void;
}

/** A batch handler call being measured and traced. */
export interface BatchCallProbe {
  run<R>(handler: (messages: StreamMessage[]) => R, messages: StreamMessage[]): R;
  /** The call settled; `failedIndex` is the entry a `BatchError` named. Never throws. */
  end(outcome: { error: unknown; failedIndex: number | undefined } | undefined): void;
}

/**
 * Per shard: the group's lag and pending, what waits in the shard's schedules (`scheduled`: every
 * group's delayed entries; `deferred`: the group's deferred retries; `parked`: its entries parked behind them), and how late the earliest due
 * of those is (`dueLagMs`, Redis' clock, 0 when none is due).
 */
export type ShardPositions = Map<
  number,
  { lag: number | null; pending: number; scheduled: number; deferred: number; parked: number; dueLagMs: number }
>;

/** What the member's poller lends its telemetry while it runs. */
export interface TelemetryTarget {
  ownedShards(): number[];
  /** The group's lag and pending on these shards (one XINFO GROUPS each), and their schedules (ShardPositions). */
  groupPositions(shards: readonly number[]): Promise<ShardPositions>;
  /** Poller events: 'acknowledged' and 'dead-letter' are counted. */
  events: EventEmitter;
  /** A failure of telemetry's own Redis reads, surfaced as the member's 'error' event. */
  reportError(error: Error): void;
}
