import { v7 as uuidv7 } from 'uuid';
import { assertCodec, codecRegistry } from '../protocol/codecs';
import { type PayloadCodec, type StreamMessage, jsonCodec } from '../protocol/entry-format';
import { type BatchOptions, type ResolvedConsumptionOptions, resolveConsumptionOptions } from './consumption-options';
import { assertStandardSchema, type StandardSchemaV1 } from '../protocol/standard-schema';
import { assertConsumerGroup, assertMemberId, assertStreamPrefix } from '../protocol/names';
import { checkOption, OPTION_RANGES } from '../protocol/option-ranges';
import type { CoordinatorOptions, HeartbeatObservation } from '../redis/coordinator-options';
import { assertReplicaWait, type ReplicaWait } from '../redis/connection/replica-wait';
import type { MemberInstrumentation } from '../telemetry/member-instrumentation';
import { MemberTelemetry } from '../telemetry/member-telemetry';
import { type DeadLetterOptions, type ResolvedDeadLetterOptions, resolveDeadLetterOptions } from './handle/dead-letter-options';

export type MessageHandler<T = unknown> = (message: StreamMessage<T>) => unknown;
/**
 * The handler of a member with `batch`: one shard's entries, in order. Resolving acknowledges them
 * all (one fenced ack); throwing retries the batch; throwing a `BatchError` says which entry failed
 * (those before it are acknowledged, the failed one and the rest are retried).
 */
export type BatchMessageHandler<T = unknown> = (messages: StreamMessage<T>[]) => unknown;

/** Options of one coordinated member (SPEC section 8). Only `streamPrefix`, `consumerGroup` and `handler` are required. */
export interface CoordinatedMemberOptions<T = unknown> extends CoordinatedMemberSettings<T> {
  handler: MessageHandler<T>;
  /** Set for batch handlers: see BatchMemberOptions. */
  batch?: undefined;
}

/** Options of a member whose handler gets batches: one shard's entries in order, at most `batch.maxSize` per call. */
export interface BatchMemberOptions<T = unknown> extends CoordinatedMemberSettings<T> {
  batch: BatchOptions;
  handler: BatchMessageHandler<T>;
}

/** Every member option but `handler` and `batch` (see CoordinatedMemberOptions and BatchMemberOptions). */
export interface CoordinatedMemberSettings<T = unknown> {
  streamPrefix: string;
  consumerGroup: string;
  /** UUIDv7 by default. Also the member's Redis consumer name. */
  memberId?: string;
  /**
   * Static membership (like Kafka's `group.instance.id`, KIP-345): a stable name for this member
   * that outlives its process, 1-128 characters of A-Z a-z 0-9 . _ -, and used as its memberId.
   * `stop()` then keeps the membership (and the shards, unread) for `sessionTimeoutMs` instead of
   * leaving, and a new process started with the same `memberInstanceId` within that time takes the
   * same shards back with a new epoch: no other member's shards move, nothing is handed off, and
   * the old process is fenced for good (it can no longer ack or dead-letter). A second live process
   * with the same `memberInstanceId` is refused (FencedInstanceIdError) once it has waited
   * `sessionTimeoutMs` for the first one to fall silent. Give every member its own.
   *
   * @example
   * new CoordinatedMember(redis, { streamPrefix: 'orders', consumerGroup: 'billing', memberInstanceId: `billing-${process.env.POD_NAME}`, handler })
   */
  memberInstanceId?: string;
  /** A label for people (dashboards, describeGroup). Defaults to the memberId. */
  memberName?: string;
  /** Handlers this member runs at once, across its shards (one at a time per shard, or per key of a shard with `lanes`). Default `lanes` (1). */
  runtimeMaxConcurrency?: number;
  /** Relative share of shards (SPEC section 4). Default 1. */
  weight?: number;
  /**
   * Creates the stream with this many shards if it has no metadata yet. A stream that exists keeps
   * its own count (it may have been resized since: `CoordinatorAdmin.resizeShards`).
   */
  shardCount?: number;
  /** The member is expired this long after its last successful heartbeat. Default 15000 ms. */
  sessionTimeoutMs?: number;
  /** The member must acknowledge a revocation within this time or be removed. Default 30000 ms. */
  rebalanceTimeoutMs?: number;
  /** How long a revoked shard waits for its in-flight handler before it is released anyway. Default: half the rebalance timeout. */
  revocationTimeoutMs?: number;
  /** How long `stop()` waits for in-flight handlers. Default 30000 ms. */
  shutdownTimeoutMs?: number;
  /**
   * Tries per entry (in place, keeping order) before it goes to the dead-letter stream. Default 3.
   * Errors that `deadLetter.nonRetryable`/`nonRetryableErrors` names go there at their first failure.
   */
  maxAttempts?: number;
  /**
   * Where dead letters go (a name, one stream per shard in the shard's slot), how many are kept,
   * which errors are not retried, and a hook called after each one is written. See DeadLetterOptions.
   */
  deadLetter?: DeadLetterOptions<T>;
  /**
   * A handler call that has not settled after this long counts as failed (retried, then
   * dead-lettered) and the shard moves on; what the call does later is ignored. 0 = no limit
   * (default), which lets a hung handler hold its shard until the revocation timeout.
   */
  handlerTimeoutMs?: number;
  /**
   * A handler call (or, with ackMode 'manual', an entry not yet acked or nacked) running longer
   * than this is stalled: one 'error' and a `stats().problems` line name the shard and the entry
   * until the call ends, and it gives its worker back, so the member's other shards go on
   * (SPEC 10.8); its shard's later entries (its key's, with lanes) keep waiting for it. Nothing is
   * aborted (that is `handlerTimeoutMs`). Default `sessionTimeoutMs`: the time the group gives a
   * silent member before it counts it as gone; a call silent that long is taken as hung rather
   * than let it hold the other shards longer than the group would wait for the member itself.
   * Raise it for handlers that take longer by design: a stalled call no longer counts against
   * `runtimeMaxConcurrency`, but at most `runtimeMaxConcurrency` calls run stalled so (past that a
   * stalled call keeps its worker), so at most twice `runtimeMaxConcurrency` calls run at once.
   * 1 s (MIN_HANDLER_STALL_MS; a default from a shorter `sessionTimeoutMs` is raised to it) to a day.
   */
  handlerStallMs?: number;
  /** First retry delay; doubles per attempt up to `retryBackoffMaxMs`. Default 100 ms. */
  retryBackoffMs?: number;
  retryBackoffMaxMs?: number;
  /** Entries read per shard and read. Default 100. */
  batchSize?: number;
  /** At most this many entries read and not yet handled (backpressure). Default 1000. */
  maxBufferedEntries?: number;
  /**
   * At most this many entries read and not yet handled by all the members made from the same
   * client together (one budget per process and client, shared through its read hub): each member
   * may always hold its share (this over the members, at least 1) and never more than its own
   * `maxBufferedEntries`. Members of one client that ask for different values share the smallest.
   * 1 to 100,000. Default 8,000 (or `maxBufferedEntries`, if larger).
   *
   * @example
   * // 64 members in one process buffer 4,096 entries together (64 each at least), not 64,000.
   * new CoordinatedMember(redis, { streamPrefix, consumerGroup, handler, maxBufferedEntriesPerClient: 4096 });
   */
  maxBufferedEntriesPerClient?: number;
  /** How long an idle read blocks. Default 2000 ms. */
  blockMs?: number;
  /** How often an owned shard is swept for entries pending at other consumers (zombie reads). Default 5000 ms. */
  sweepIntervalMs?: number;
  /** While the group cuts over after a resize, how often this member checks whether it may complete. Default 250 ms. */
  cutoverCheckIntervalMs?: number;
  /**
   * The codec of entries that name none (written before codecs were named). Default JSON. Entries
   * name the codec that wrote them (`c`), and are decoded with it: `json` and `msgpack` are built
   * in, others are added with `codecs`. An entry whose codec the member does not know goes to the
   * dead letters (cause `undecodable`) with a reason naming it.
   */
  codec?: PayloadCodec;
  /** More codecs this member decodes, by name (a custom one may replace a built-in of its name). */
  codecs?: PayloadCodec[];
  /**
   * Validates each decoded payload before the handler sees it: any Standard Schema (zod 4, valibot,
   * ArkType…). An entry that does not match goes to the dead letters at once (cause `invalid`, the
   * schema's messages as the reason), never retried; the handler gets the schema's output (with
   * its defaults and transforms). With `batch`, each entry is checked on its own: one that does
   * not match is dead-lettered in place and the batch holds the others; with `lanes`, only its key's
   * lane is held until its dead letter is written.
   *
   * @example
   * schema: z.object({ orderId: z.string(), amount: z.number().positive() })
   */
  schema?: StandardSchemaV1;
  /** Coordinator settings (key prefix, intervals, assignor); the same for every member of a group. */
  coordinator?: CoordinatorOptions;
  /**
   * OpenTelemetry metrics and traces through `@opentelemetry/api` (docs/observability.md). Default
   * true: they are produced when the application has the API installed and a meter or tracer
   * provider registered when the member starts, and cost one check per entry otherwise. false turns
   * them off altogether.
   */
  telemetry?: boolean;
  /**
   * Key-ordered lanes: inside one shard, entries of different routing keys run in parallel on up
   * to this many lanes, the entries of one key strictly in order (entries without a key share one
   * lane). Default 1: the shard's entries one at a time. `runtimeMaxConcurrency` still caps the
   * member's handlers in all (its default becomes `lanes`).
   */
  lanes?: number;
  /**
   * 'auto' (default): an entry is acknowledged when its handler returns or resolves. 'manual': the
   * handler (or code it hands the message to) calls `message.ack()` or `message.nack()`; the next
   * entry of the shard (of the key, with lanes) waits until then, at most `ackTimeoutMs`.
   */
  ackMode?: 'auto' | 'manual';
  /**
   * How a failed entry is retried (docs/runtime.md, Deferred retries). 'in-place' (default): in
   * memory, after its backoff, the shard's later entries (its key's, with lanes) waiting; a
   * restart or a handoff starts its attempts over. 'deferred': acknowledged and put in the group's
   * durable schedule of its shard in one fenced step, with its attempt count, and released into the
   * shard stream after its backoff; the shard goes on with its other entries at once, and the
   * attempts count on across restarts and handoffs (after `maxAttempts`, dead-lettered as usual).
   * Its key's later entries wait for it as `deferredOrder` says. Not with `batch`.
   */
  retryMode?: 'in-place' | 'deferred';
  /**
   * The order of a key whose entry was deferred (`retryMode: 'deferred'`, `nack({ defer: true })`;
   * docs/runtime.md, Deferred retries). 'key' (default): while a key has a deferred entry on a shard,
   * the group's later entries of that key on the shard are parked behind it, durably and in order,
   * and run after it settles; other keys never wait. 'none': they do not wait (they may run before
   * it, the retry-topic behaviour).
   * @example
   * new CoordinatedMember(redis, { streamPrefix, consumerGroup, handler, retryMode: 'deferred', deferredOrder: 'key' });
   */
  deferredOrder?: 'key' | 'none';
  /** ackMode 'manual': an entry neither acked nor nacked this long after its handler started counts as failed. Default 30000 ms. */
  ackTimeoutMs?: number;
  /**
   * Durability of acknowledgements against a failover (docs/cluster.md): each fenced ack batch is
   * followed by `WAIT replicas timeoutMs` on the same connection, so an entry counts as
   * acknowledged only once that many replicas of its shard's master have the ack. When WAIT counts
   * fewer in time the member reports it ('error', a `NotReplicatedError` cause) and goes on: the
   * ack stays on the master, and a failover before it reaches a replica redelivers those entries
   * (at-least-once holds either way; this narrows the redeliveries a failover causes). Default:
   * no WAIT. Costs the replication round trip per ack batch.
   */
  ackWaitForReplicas?: ReplicaWait;
  /**
   * Reset the client passed in (the member's command connection: heartbeats, acknowledgements,
   * claims) when two heartbeats in a row got no answer within a third of the session timeout: the
   * socket is destroyed and ioredis reconnects and sends again what waited on it, as it does when a
   * socket fails by itself (docs/runtime.md, "A stuck command connection"). Without it, a half-open
   * connection (NAT or firewall state dropped: no error, no reply) keeps the member from renewing its
   * lease until TCP gives up, minutes later. Also when a heartbeat was refused READONLY and the
   * client has no `reconnectOnError` (a connection left on a master made a replica: docs/cluster.md).
   * Default false: the client is the application's, and the reset resends the application's
   * unanswered commands too. The NestJS module sets it for the connections it creates itself.
   */
  resetStuckConnection?: boolean;
}

export type ResolvedMemberOptions<T = unknown> = Required<
  Omit<
    CoordinatedMemberSettings<T>,
    | 'shardCount'
    | 'coordinator'
    | 'telemetry'
    | 'deadLetter'
    | 'ackWaitForReplicas'
    | 'memberInstanceId'
    | 'schema'
    | 'codecs'
    | keyof ResolvedConsumptionOptions
  >
> &
  Pick<CoordinatedMemberSettings<T>, 'shardCount' | 'coordinator' | 'ackWaitForReplicas' | 'memberInstanceId' | 'schema'> &
  ResolvedConsumptionOptions & {
    /** A MessageHandler, or a BatchMessageHandler when `batch` is set. */
    handler: (input: never) => unknown;
    /** Every codec the member decodes with, by name. */
    codecs: ReadonlyMap<string, PayloadCodec>;
    deadLetter: ResolvedDeadLetterOptions<T>;
    /** The member's instrumentation (a MemberTelemetry); undefined when `telemetry` is false. */
    telemetry: MemberInstrumentation | undefined;
  };

const DEFAULT_SESSION_TIMEOUT_MS = 15_000;
/**
 * The default budget of the members of one client (maxBufferedEntriesPerClient): 8 members' worth
 * of the default maxBufferedEntries. 64 members of 1,000 each held up to 64,000 entries, 2.3 times
 * the peak heap of one raw read loop under the same backlog; with this, about as much as the loop
 * (docs/benchmarks.md, 6. Memory).
 */
const DEFAULT_MAX_BUFFERED_ENTRIES_PER_CLIENT = 8000;
/** The largest `runtimeMaxConcurrency`, at construction and in `setRuntimeMaxConcurrency`. */
export const MAX_RUNTIME_CONCURRENCY: number = OPTION_RANGES['member.runtimeMaxConcurrency'].max;
/** The longest `memberName`: a label for people, stored in every heartbeat's member record. */
export const MAX_MEMBER_NAME_LENGTH = 256;
/** The shortest `handlerStallMs` (why: its row in OPTION_RANGES); a default from a shorter `sessionTimeoutMs` is raised to it. */
export const MIN_HANDLER_STALL_MS: number = OPTION_RANGES['member.handlerStallMs'].min;

/** Fills defaults and checks every option; a bad one is an error naming the option and the value. */
export function resolveMemberOptions<T>(options: CoordinatedMemberOptions<T> | BatchMemberOptions<T>): ResolvedMemberOptions<T> {
  if (options === null || typeof options !== 'object') throw new TypeError('CoordinatedMember options must be an object');
  assertStreamPrefix(options.streamPrefix);
  assertConsumerGroup(options.consumerGroup);
  if (typeof options.handler !== 'function') {
    throw new TypeError(`handler must be a function, got ${options.handler === null ? 'null' : typeof options.handler}`);
  }
  const memberInstanceId =
    options.memberInstanceId === undefined ? undefined : assertMemberId(options.memberInstanceId, 'memberInstanceId');
  if (memberInstanceId !== undefined && options.memberId !== undefined && options.memberId !== memberInstanceId) {
    throw new RangeError(
      `memberInstanceId ${JSON.stringify(memberInstanceId)} is also the memberId: give one of them, or both equal (memberId is ${JSON.stringify(options.memberId)})`,
    );
  }
  const memberId = assertMemberId(options.memberId ?? memberInstanceId ?? uuidv7());
  const consumption = resolveConsumptionOptions(options);
  const rebalanceTimeoutMs = options.rebalanceTimeoutMs ?? 30_000;
  const resolved: ResolvedMemberOptions<T> = {
    streamPrefix: options.streamPrefix,
    consumerGroup: options.consumerGroup,
    handler: options.handler,
    memberId,
    memberInstanceId,
    memberName: options.memberName ?? memberId,
    runtimeMaxConcurrency: options.runtimeMaxConcurrency ?? consumption.lanes,
    weight: options.weight ?? 1,
    shardCount: options.shardCount,
    sessionTimeoutMs: options.sessionTimeoutMs ?? DEFAULT_SESSION_TIMEOUT_MS,
    rebalanceTimeoutMs,
    revocationTimeoutMs: options.revocationTimeoutMs ?? Math.floor(rebalanceTimeoutMs / 2),
    shutdownTimeoutMs: options.shutdownTimeoutMs ?? 30_000,
    maxAttempts: options.maxAttempts ?? 3,
    deadLetter: resolveDeadLetterOptions(options.deadLetter, options.consumerGroup),
    handlerTimeoutMs: options.handlerTimeoutMs ?? 0,
    handlerStallMs: options.handlerStallMs ?? Math.max(MIN_HANDLER_STALL_MS, options.sessionTimeoutMs ?? DEFAULT_SESSION_TIMEOUT_MS),
    retryBackoffMs: options.retryBackoffMs ?? 100,
    retryBackoffMaxMs: options.retryBackoffMaxMs ?? 10_000,
    // A batch must be able to fill from one read of the shard.
    batchSize: options.batchSize ?? Math.max(100, consumption.batch?.maxSize ?? 0),
    maxBufferedEntries: options.maxBufferedEntries ?? 1000,
    maxBufferedEntriesPerClient:
      options.maxBufferedEntriesPerClient ?? Math.max(DEFAULT_MAX_BUFFERED_ENTRIES_PER_CLIENT, options.maxBufferedEntries ?? 0),
    blockMs: options.blockMs ?? 2000,
    sweepIntervalMs: options.sweepIntervalMs ?? 5000,
    cutoverCheckIntervalMs: options.cutoverCheckIntervalMs ?? 250,
    codec: options.codec ?? jsonCodec,
    codecs: new Map(),
    schema: options.schema === undefined ? undefined : assertStandardSchema(options.schema),
    coordinator: options.coordinator,
    telemetry: undefined,
    ackWaitForReplicas: assertReplicaWait('ackWaitForReplicas', options.ackWaitForReplicas),
    resetStuckConnection: options.resetStuckConnection ?? false,
    ...consumption,
  };
  if (
    typeof resolved.memberName !== 'string' ||
    resolved.memberName.length === 0 ||
    resolved.memberName.length > MAX_MEMBER_NAME_LENGTH ||
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this check refuses
    /[\x00-\x1f\x7f]/.test(resolved.memberName)
  ) {
    throw new RangeError(`memberName must be 1-${MAX_MEMBER_NAME_LENGTH} printable characters, got ${JSON.stringify(resolved.memberName)}`);
  }
  checkOption('member.runtimeMaxConcurrency', resolved.runtimeMaxConcurrency);
  checkOption('member.weight', resolved.weight);
  if (resolved.shardCount !== undefined) checkOption('shardCount', resolved.shardCount);
  checkOption('member.sessionTimeoutMs', resolved.sessionTimeoutMs);
  checkOption('member.rebalanceTimeoutMs', resolved.rebalanceTimeoutMs);
  checkOption('member.revocationTimeoutMs', resolved.revocationTimeoutMs, { max: resolved.rebalanceTimeoutMs });
  checkOption('member.shutdownTimeoutMs', resolved.shutdownTimeoutMs);
  checkOption('member.maxAttempts', resolved.maxAttempts);
  checkOption('member.handlerTimeoutMs', resolved.handlerTimeoutMs);
  checkOption('member.handlerStallMs', resolved.handlerStallMs);
  checkOption('member.retryBackoffMs', resolved.retryBackoffMs);
  checkOption('member.retryBackoffMaxMs', resolved.retryBackoffMaxMs, { min: resolved.retryBackoffMs });
  checkOption('member.batchSize', resolved.batchSize);
  checkOption('member.maxBufferedEntries', resolved.maxBufferedEntries);
  checkOption('member.maxBufferedEntriesPerClient', resolved.maxBufferedEntriesPerClient);
  checkOption('member.blockMs', resolved.blockMs);
  checkOption('member.sweepIntervalMs', resolved.sweepIntervalMs);
  checkOption('member.cutoverCheckIntervalMs', resolved.cutoverCheckIntervalMs);
  if (resolved.batch && resolved.batch.maxSize > resolved.batchSize) {
    throw new RangeError(
      `batch.maxSize (${resolved.batch.maxSize}) must not exceed batchSize (${resolved.batchSize}), the entries read per shard and read: a batch could never fill`,
    );
  }
  if (resolved.batch && resolved.batch.maxSize > resolved.maxBufferedEntries) {
    throw new RangeError(
      `batch.maxSize (${resolved.batch.maxSize}) must not exceed maxBufferedEntries (${resolved.maxBufferedEntries}): a batch could never fill`,
    );
  }
  if (resolved.batch && resolved.batch.maxSize > resolved.maxBufferedEntriesPerClient) {
    throw new RangeError(
      `batch.maxSize (${resolved.batch.maxSize}) must not exceed maxBufferedEntriesPerClient (${resolved.maxBufferedEntriesPerClient}): a batch could never fill`,
    );
  }
  assertCodec(resolved.codec);
  if (options.codecs !== undefined && !Array.isArray(options.codecs))
    throw new TypeError(`codecs must be an array of codecs, got ${typeof options.codecs}`);
  resolved.codecs = codecRegistry(
    resolved.codec,
    (options.codecs ?? []).map((codec, i) => assertCodec(codec, `codecs[${i}]`)),
  );
  if (typeof resolved.resetStuckConnection !== 'boolean') {
    throw new TypeError(`resetStuckConnection must be a boolean, got ${JSON.stringify(resolved.resetStuckConnection)}`);
  }
  if (options.telemetry !== undefined && typeof options.telemetry !== 'boolean') {
    throw new TypeError(`telemetry must be a boolean, got ${JSON.stringify(options.telemetry)}`);
  }
  if (options.telemetry !== false) {
    const telemetry = new MemberTelemetry({ streamPrefix: resolved.streamPrefix, consumerGroup: resolved.consumerGroup, memberId });
    resolved.telemetry = telemetry;
    // The member's coordinator client reports each heartbeat to it (and to the caller's own observer).
    const own = options.coordinator?.onHeartbeat;
    if (own !== undefined && typeof own !== 'function')
      throw new TypeError(`coordinator.onHeartbeat must be a function, got ${typeof own}`);
    const onHeartbeat = own
      ? (observation: HeartbeatObservation) => {
          telemetry.onHeartbeat(observation);
          own(observation);
        }
      : telemetry.onHeartbeat;
    resolved.coordinator = { ...options.coordinator, onHeartbeat };
  }
  return resolved;
}

/** Delay before retry `attempt` (1-based: the delay after the first failure is `base`). */
export function retryDelayMs(attempt: number, base: number, max: number): number {
  return Math.min(max, base * 2 ** (attempt - 1));
}

/** How long one coordinator call may take before the member treats it as failed: a third of the session timeout. */
export function coordinatorCallTimeoutMs(options: { readonly sessionTimeoutMs: number }): number {
  return Math.max(100, Math.floor(options.sessionTimeoutMs / 3));
}

/**
 * The least time a call the member makes beside its heartbeats (a claim, a sweep, a dead letter, an
 * acknowledgement) is given before it counts as unanswered (SPEC 10.1). Such a call is retried and
 * renews nothing, so it need not be as tight as a heartbeat: on a slow link (answers close to a third
 * of a short session) a tighter bound would fail it over and over and hold the read loop in retries.
 * The same floor as a read's grace (ShardReader.readGraceMs).
 */
export const MIN_COMMAND_CALL_TIMEOUT_MS = 2000;

/** The bound of one call beside the heartbeats: a third of the session timeout, at least MIN_COMMAND_CALL_TIMEOUT_MS. */
export function commandCallTimeoutMs(options: { readonly sessionTimeoutMs: number }): number {
  return Math.max(MIN_COMMAND_CALL_TIMEOUT_MS, coordinatorCallTimeoutMs(options));
}

/**
 * How long one acknowledgement call may take before it counts as unanswered and is retried (SPEC
 * 10.1): as any call beside the heartbeats, plus the `WAIT` that follows it with
 * `ackWaitForReplicas` (it may take its whole `timeoutMs` when replicas are missing).
 */
export function ackCallTimeoutMs(options: {
  readonly sessionTimeoutMs: number;
  readonly ackWaitForReplicas?: { timeoutMs: number };
}): number {
  return commandCallTimeoutMs(options) + (options.ackWaitForReplicas?.timeoutMs ?? 0);
}
