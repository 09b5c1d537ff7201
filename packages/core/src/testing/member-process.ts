/**
 * A member in a process of its own, for fault-injection tests (test/reliability): started by a
 * driver with its settings in the RSC_MEMBER_PROCESS environment variable (JSON), it runs a real
 * `CoordinatedMember` and appends every handler start and end, acknowledgement, dead letter and
 * ownership change to a record file, one JSON line per `write` call, so that whatever returned before
 * a SIGKILL is in the file. SIGTERM stops it gracefully (drain, acknowledge, leave); SIGUSR1 makes
 * every later handler call take `longHandlerMs` (a slow handler during a graceful stop); SIGUSR2
 * starts or ends a failing spell (30% of entries fail every attempt, so dead letters are written
 * while a fault makes dead-letter streams unwritable); SIGHUP starts or ends a flaky spell (30% of
 * entries fail every attempt but the last, so retries keep falling due and nothing is dead-lettered,
 * whose writes could hold a shard up). It prints
 * "ready" when joined, and exits with code 3 when `start()` fails for good.
 *
 * Record lines (every one has t, m and g, the consumer group; h, the process, when another may share m):
 * { e: 'start', ep, s, id, k, q, dc, n, rp?, rg? }  a handler call began (n: this process's attempt number;
 *                                                   rp, rg: a dead letter's replay, its rsc-replay-of and rsc-replay-group)
 * { e: 'end', ep, s, id, k, q, ok }                 it settled (ok false: it threw, on purpose)
 * { e: 'ack', s, ge, ids, ok }                      acknowledgements sent; ok: the fencing check accepted them
 * { e: 'dead-letter', s, id, n }                    the member says it dead-lettered the entry
 * { e: 'deferred' | 'parked', s, id, n, due }        (deferred members) the entry was acknowledged into the group's schedule, due at `due`
 * { e: 'assigned' | 'revoked' | 'fenced' | 'lease-lost', shards, ep }
 * { e: 'error', msg }, { e: 'stopped' }
 * { e: 'problems', lines }                           stats().problems changed (sampled every PROBLEMS_SAMPLE_MS; [] once clear)
 * `t` is wall-clock milliseconds with microsecond precision (comparable across processes on a host;
 * taken from `performance`, so `clockOffsetMs` does not move it).
 */
import fs from 'node:fs';
import { Cluster, Redis } from 'ioredis';
import { REPLAY_HEADER } from '../admin/dead-letter-replay';
import { CoordinatedMember } from '../member/coordinated-member';
import { BatchError } from '../member/consumption-errors';
import type { CoordinatedMemberOptions } from '../member/member-options';
import type { StreamMessage } from '../protocol/entry-format';
import type { ShardState } from '../member/shard-state';
import { LOADING_RETRY_MS } from '../redis/connection/connection-defaults';

export interface MemberProcessSettings {
  /** A single Redis (or the member's proxy in front of it); exactly one of `url` and `clusterNodes`. */
  url?: string;
  /** A Redis Cluster's startup nodes: the member connects with an ioredis `Cluster` (no proxy can sit in front of one). */
  clusterNodes?: { host: string; port: number }[];
  /** Passed to the member: `WAIT` for replicas after each ack batch (on a cluster, so that a failover does not undo acks). */
  ackWaitForReplicas?: { replicas: number; timeoutMs: number };
  /** Passed to the member: a connection that stops answering is reset (the process made it, as the NestJS module does). */
  resetStuckConnection?: boolean;
  streamPrefix: string;
  consumerGroup: string;
  memberId: string;
  recordFile: string;
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  runtimeMaxConcurrency: number;
  /** Key-ordered lanes per shard (the member's `lanes`); default 1. */
  lanes?: number;
  /** Static membership: `memberId` is the member's `memberInstanceId` too (a later process with it takes the member over). */
  staticMember?: boolean;
  /** A batch handler (`batch: { maxSize }`): the entries of a call run one by one, the first that fails ends it with a `BatchError`. */
  batchMaxSize?: number;
  /** `ackMode: 'manual'`: each entry is acked (or nacked, to fail the attempt) just after its handler returned. */
  manualAcks?: boolean;
  /**
   * `retryMode: 'deferred'` with this `deferredOrder`: a failed attempt is acknowledged and put in the
   * group's schedule, and comes back as a copy with a new id (docs/runtime.md, Deferred retries).
   * Failures are then decided by the entry's key and sequence number and its `deliveryCount` (which
   * goes on across copies), not by its id: a copy fails or succeeds as its original would.
   */
  deferred?: 'key' | 'none';
  /** This process's name in the records (`h`), when another process may run with the same memberId (static restarts). */
  handle?: string;
  /** How long each handler call takes (a timer). */
  handlerDelayMs: number;
  /** Passed to the member: it creates the stream with this many shards when the metadata is missing. */
  shardCount?: number;
  sweepIntervalMs?: number;
  maxAttempts?: number;
  retryBackoffMs?: number;
  shutdownTimeoutMs?: number;
  rebalanceTimeoutMs?: number;
  /**
   * Handler failures, decided by a hash of the entry id so every process agrees: entries whose hash
   * falls below `failPercent` (of 100) fail their first attempt in this process; below
   * `deadPermille` (of 1000) they fail every attempt (and are dead-lettered).
   */
  failPercent?: number;
  deadPermille?: number;
  /** After SIGUSR1, each handler call takes this long instead of `handlerDelayMs`. */
  longHandlerMs?: number;
  /**
   * Shifts this process's `Date.now()` (and `new Date()`) by this much: a host whose wall clock is
   * off. The protocol must not care (it uses Redis time and monotonic clocks). faketime is not
   * installed on the test machines, hence the in-process shift.
   */
  clockOffsetMs?: number;
  /**
   * Runs a second member on the same client, in a group of its own on an idle stream
   * (`<streamPrefix>-companion`): the member then shares its process's ReadHub (the doorbell and the
   * shared read connection) instead of reading alone with a blocking XREADGROUP.
   */
  companion?: boolean;
}

export const MEMBER_PROCESS_ENV = 'RSC_MEMBER_PROCESS';

/**
 * How often the process samples `stats().problems` for its record: well under the shortest trouble
 * a fault kind must see listed (an unanswered call lasts a third of the session at least).
 */
const PROBLEMS_SAMPLE_MS = 100;

/** A replayed entry's headers as record fields (rp: the dead letter's ref, rg: its group); nothing for other entries. */
function replayOf(headers: Record<string, string> | undefined): { rp?: string; rg?: string } {
  const of = headers?.[REPLAY_HEADER.of];
  return of === undefined ? {} : { rp: of, rg: headers?.[REPLAY_HEADER.group] };
}

/** FNV-1a of the entry id, 0..999: the same verdict in every process. */
export function entryHash(id: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193) >>> 0;
  return h % 1000;
}

function shiftClock(offsetMs: number): void {
  const RealDate = Date;
  const realNow = Date.now.bind(Date);
  class ShiftedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(realNow() + offsetMs);
      else super(...(args as [number]));
    }
    static override now(): number {
      return realNow() + offsetMs;
    }
  }
  globalThis.Date = ShiftedDate as DateConstructor;
}

/**
 * One connection as an application would make it: to one Redis with fast retries, or to a Cluster
 * with the failover-tolerant options docs/cluster.md recommends (retry through a failover or a
 * half-moved slot instead of failing the call).
 */
function connect(settings: MemberProcessSettings): Redis | Cluster {
  const redisOptions = { maxRetriesPerRequest: 1, retryStrategy: () => 50, maxLoadingRetryTime: LOADING_RETRY_MS };
  if (settings.clusterNodes) {
    return new Cluster(settings.clusterNodes, {
      retryDelayOnFailover: 100,
      retryDelayOnClusterDown: 100,
      retryDelayOnTryAgain: 50,
      maxRedirections: 64,
      redisOptions: { ...redisOptions, maxRetriesPerRequest: 20 },
    });
  }
  if (!settings.url) throw new Error('member process: settings need url or clusterNodes');
  return new Redis(settings.url, redisOptions);
}

function main(): void {
  const settings = JSON.parse(process.env[MEMBER_PROCESS_ENV] ?? '') as MemberProcessSettings;
  if (settings.clockOffsetMs) shiftClock(settings.clockOffsetMs);
  const fd = fs.openSync(settings.recordFile, 'a');
  const now = () => performance.timeOrigin + performance.now();
  // The process, when it is not the only one with its member id (a static member restarted).
  const proc = settings.handle !== undefined && settings.handle !== settings.memberId ? { h: settings.handle } : {};
  const record = (line: Record<string, unknown>) =>
    fs.writeSync(fd, `${JSON.stringify({ t: now(), m: settings.memberId, ...proc, g: settings.consumerGroup, ...line })}\n`);

  let handlerDelayMs = settings.handlerDelayMs;
  process.on('SIGUSR1', () => {
    handlerDelayMs = settings.longHandlerMs ?? handlerDelayMs;
    record({ e: 'long-handlers', ms: handlerDelayMs });
  });
  let failingSpell = false;
  process.on('SIGUSR2', () => {
    failingSpell = !failingSpell;
    record({ e: 'failing-spell', on: failingSpell });
  });
  let flakySpell = false;
  process.on('SIGHUP', () => {
    flakySpell = !flakySpell;
    record({ e: 'flaky-spell', on: flakySpell });
  });
  // Per shard and entry id: ids of different shard streams can be equal.
  const attempts = new Map<string, number>();

  /**
   * One attempt of one entry: records its start, takes handlerDelayMs (unless `wait` is false: a
   * batch's entries after its first), decides by the entry id's
   * hash (and the spells) whether it fails, records its end; true when it succeeded.
   */
  const attempt = async (message: StreamMessage<{ seq: number }>, wait = true): Promise<boolean> => {
    const attemptKey = `${message.shardIndex}/${message.id}`;
    const n = (attempts.get(attemptKey) ?? 0) + 1;
    attempts.set(attemptKey, n);
    const base = { ep: member.currentMemberEpoch(), s: message.shardIndex, id: message.id, k: message.key, q: message.payload.seq };
    record({ e: 'start', ...base, dc: message.deliveryCount, n, ...replayOf(message.headers) });
    if (wait) await new Promise((resolve) => setTimeout(resolve, handlerDelayMs));
    // A deferred copy has a new id and its attempts go on in deliveryCount: decided by key and sequence number.
    const hash = settings.deferred ? entryHash(`${message.key}#${message.payload.seq}`) : entryHash(message.id);
    const tries = settings.deferred ? message.deliveryCount : n;
    const fail =
      hash < (failingSpell ? 300 : (settings.deadPermille ?? 0)) ||
      (flakySpell && hash < 300 && tries < (settings.maxAttempts ?? 3)) ||
      (tries === 1 && hash % 100 < (settings.failPercent ?? 0));
    record({ e: 'end', ...base, ok: !fail });
    if (!fail) attempts.delete(attemptKey);
    return !fail;
  };
  const failure = (message: StreamMessage<unknown>) => new Error(`chaos: ${message.id} fails on purpose`);
  // The kind of member (MemberProcessSettings.batchMaxSize, manualAcks): how its handler settles entries.
  const kindOptions = settings.batchMaxSize
    ? {
        batch: { maxSize: settings.batchMaxSize },
        // One by one in the batch's order; the first that fails ends the call naming it (those before are done).
        // The handler's time is the batch's, taken once (one I/O for the batch, as a batch handler is
        // written for): taken per entry, one lane of a batch member read a late group's history at
        // a few hundred entries/s on a loaded machine and never caught up with the load.
        handler: async (messages: StreamMessage<{ seq: number }>[]) => {
          for (const [i, message] of messages.entries()) if (!(await attempt(message, i === 0))) throw new BatchError(i, failure(message));
        },
      }
    : settings.manualAcks
      ? {
          ackMode: 'manual' as const,
          // Settled after the handler returned, as code the message was handed to would: ack, or nack to fail the attempt.
          handler: async (message: StreamMessage<{ seq: number }>) => {
            const ok = await attempt(message);
            setImmediate(() => void (ok ? message.ack() : message.nack({ reason: failure(message).message })).catch(() => undefined));
          },
        }
      : {
          handler: async (message: StreamMessage<{ seq: number }>) => {
            if (!(await attempt(message))) throw failure(message);
          },
        };

  const redis = connect(settings);
  redis.on('error', () => undefined);
  const member: CoordinatedMember<{ seq: number }> = new CoordinatedMember<{ seq: number }>(redis, {
    streamPrefix: settings.streamPrefix,
    consumerGroup: settings.consumerGroup,
    memberId: settings.memberId,
    memberInstanceId: settings.staticMember ? settings.memberId : undefined,
    shardCount: settings.shardCount,
    ackWaitForReplicas: settings.ackWaitForReplicas,
    resetStuckConnection: settings.resetStuckConnection,
    sessionTimeoutMs: settings.sessionTimeoutMs,
    runtimeMaxConcurrency: settings.runtimeMaxConcurrency,
    lanes: settings.lanes,
    ...(settings.deferred ? { retryMode: 'deferred' as const, deferredOrder: settings.deferred } : {}),
    blockMs: 500,
    sweepIntervalMs: settings.sweepIntervalMs ?? 500,
    maxAttempts: settings.maxAttempts,
    retryBackoffMs: settings.retryBackoffMs,
    shutdownTimeoutMs: settings.shutdownTimeoutMs,
    rebalanceTimeoutMs: settings.rebalanceTimeoutMs,
    coordinator: { heartbeatIntervalMs: settings.heartbeatIntervalMs },
    ...kindOptions,
  } as CoordinatedMemberOptions<{ seq: number }>);
  member.on('acknowledged', (a) => record({ e: 'ack', s: a.shardIndex, ge: a.grantEpoch, ids: a.ids, ok: a.accepted }));
  member.on('dead-letter', (d) => record({ e: 'dead-letter', s: d.shardIndex, id: d.id, n: d.attempts }));
  member.on('deferred', (d) => record({ e: 'deferred', s: d.shardIndex, id: d.id, n: d.attempts, due: d.dueAt }));
  member.on('parked', (d) => record({ e: 'parked', s: d.shardIndex, id: d.id, n: d.attempts, due: d.dueAt }));
  member.on('assigned', (a) => record({ e: 'assigned', shards: a.shards, ep: a.memberEpoch }));
  member.on('revoked', (a) => record({ e: 'revoked', shards: a.shards, ep: a.memberEpoch }));
  member.on('fenced', (a) => record({ e: 'fenced', shards: a.shards, ep: a.memberEpoch, msg: a.message }));
  member.on('lease-lost', (a) => record({ e: 'lease-lost', shards: a.shards, ep: a.memberEpoch }));
  member.on('error', (error) => record({ e: 'error', msg: `${(error as { code?: unknown }).code ?? ''} ${error.message}`.trim() }));
  // What health would report, when it changes: a fault kind checks the member said so while it lasted.
  let problems = '[]';
  setInterval(() => {
    const now = JSON.stringify(member.stats().problems);
    if (now === problems) return;
    problems = now;
    record({ e: 'problems', lines: member.stats().problems });
  }, PROBLEMS_SAMPLE_MS).unref();

  const companion = settings.companion
    ? new CoordinatedMember(redis, {
        streamPrefix: `${settings.streamPrefix}-companion`,
        consumerGroup: `${settings.consumerGroup}-companion`,
        memberId: `${settings.memberId}-companion`,
        shardCount: 2,
        sessionTimeoutMs: settings.sessionTimeoutMs,
        coordinator: { heartbeatIntervalMs: settings.heartbeatIntervalMs },
        handler: () => undefined,
      })
    : undefined;
  // Its troubles are not the chaos member's: they are not recorded. Started first (and retried),
  // so the chaos member reads through the shared path from its first read on.
  companion?.on('error', () => undefined);
  const startCompanion = (): void =>
    void companion?.start().catch((error: Error) => {
      if (error.name !== 'FencedInstanceIdError') setTimeout(startCompanion, 200);
    });
  startCompanion();

  // SIGWINCH: one 'state' line with what the member's read loop is doing (for a test that timed
  // out waiting for this member: which of its shards it reads, holds, waits on). Internals, read
  // through casts: a diagnostic of the test tool, not an API.
  process.on('SIGWINCH', () => {
    try {
      record({ e: 'state', ...memberState(member) });
    } catch (error) {
      record({ e: 'state', failed: (error as Error).message });
    }
  });
  process.on('SIGTERM', () => {
    record({ e: 'stopping' });
    void Promise.all([member.stop(), companion?.stop()]).finally(() => {
      record({ e: 'stopped' });
      redis.disconnect();
      process.exit(0);
    });
  });
  // As an application would: a start that failed for a passing reason (Redis slow to answer on a
  // loaded machine, restarting) is tried again; only an id taken by another live process is final.
  const start = (): void => {
    member.start().then(
      () => process.stdout.write('ready\n'),
      (error: Error) => {
        record({ e: 'error', msg: `start: ${(error as { code?: unknown }).code ?? ''} ${error.name} ${error.message}` });
        if (error.name !== 'FencedInstanceIdError') {
          setTimeout(start, 200);
          return;
        }
        redis.disconnect();
        process.exit(3);
      },
    );
  };
  start();
}

/** The member's read side as plain data (see SIGWINCH). */
function memberState(member: CoordinatedMember<{ seq: number }>): Record<string, unknown> {
  // biome-ignore lint/suspicious/noExplicitAny: a diagnostic of internals
  const m = member as any;
  const poller = m.poller;
  const reader = poller.reader;
  const polling = reader.polling;
  const now = Date.now();
  const shards = poller.shards.all().map((state: ShardState) => {
    const poll = polling.polls.get(state);
    return {
      s: state.index,
      ge: state.grantEpoch,
      phase: state.phase,
      queue: state.queue.length,
      held: state.held.length,
      work: [...state.work.entries()].map(([k, w]) => `${k}:${w.ids.join(',')}${w.call ? '*' : ''}`),
      readCursor: state.readCursor,
      takeoverCursor: state.takeoverCursor,
      sweeping: state.sweeping,
      sinceSweep: now - state.lastSweepAt,
      problems: [...state.problems.values()],
      pollDelay: poll?.delayMs,
      dueIn: poll ? poll.nextAt - now : undefined,
      woken: polling.woken.has(state.index),
      wake: polling.wakes.get(state.index)?.confirmed,
      covered: reader.lastCovered.get(state),
    };
  });
  return {
    stats: member.stats(),
    lifecycle: m.lifecycle,
    shards,
    holds: [...poller.shards.holds],
    lingering: [...poller.shards.lingering.keys()],
    buffered: poller.shards.buffered,
    reader: {
      running: reader.running,
      reads: reader.reads,
      waitingForRoom: reader.waitingForRoom,
      sinceRead: now - reader.lastReadAt,
      currentRead: reader.currentRead ? [...reader.currentRead.shards] : null,
      mode: reader.currentRead?.mode,
    },
    dispatcher: { busy: poller.dispatcher.busy },
    mayStart: m.mayStartHandlers(),
    paused: poller.paused,
  };
}

if (require.main === module) main();
