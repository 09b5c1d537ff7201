import {
  type BatchMemberOptions,
  CoordinatedMember,
  type CoordinatedMemberOptions,
  CoordinatorAdmin,
  type CoordinatorOptions,
  OPTION_RANGES,
  type OptionRangeName,
  type StreamMessage,
  StreamProducer,
  type StreamProducerOptions,
} from '@redis-stream-coordinator/core';
import { expect } from 'vitest';
import { pollUntil } from '../support/poll';
import { type RedisFixture, uniqueName } from '../support/vitest-redis';

/** `quick`: in `npm test` (test/edge/edge-quick.test.ts); `slow`: `npm run test:edge` (test/edge/edge-slow.edge.ts). */
export type EdgeTier = 'quick' | 'slow';

/** One short run with options at the maximum of their rows in OPTION_RANGES (SPEC 10.7). */
export interface EdgeCase {
  /** What it runs and what must hold. */
  title: string;
  /** The rows it runs at their maximum: every row of OPTION_RANGES is in some case's list. */
  covers: readonly OptionRangeName[];
  tier: EdgeTier;
  /** Its own bound (the test's timeout). */
  timeoutMs: number;
  run(env: EdgeEnv): Promise<void>;
}

/** The maximum of a row: what a case passes for the option (never a literal of its own). */
export const maxOf = (name: OptionRangeName): number => OPTION_RANGES[name].max;

export interface EdgePayload {
  seq: number;
}

type EdgeMemberOptions = Partial<CoordinatedMemberOptions<EdgePayload>> | Partial<BatchMemberOptions<EdgePayload>>;

/** How long a graceful `stop()` may take here with Redis answering: no option at its maximum may make it wait that long. */
export const STOP_BOUND_MS = 5000;

/** One case's world: the file's redis-server, and what to stop after the case, pass or fail. */
export class EdgeEnv {
  private readonly ends: (() => unknown)[] = [];
  /** 'error' events of the members made here (message and cause). */
  readonly errors: string[] = [];

  constructor(readonly redis: RedisFixture) {}

  /** Runs after the case (last registered first), pass or fail. */
  onEnd(end: () => unknown): void {
    this.ends.push(end);
  }

  async end(): Promise<void> {
    for (const end of this.ends.splice(0).reverse())
      await Promise.resolve()
        .then(end)
        .catch(() => undefined);
  }

  admin(coordinator: CoordinatorOptions = {}): CoordinatorAdmin {
    return new CoordinatorAdmin(this.redis.client(), coordinator);
  }

  /** A member of group "group" with heartbeats every 100 ms unless `options.coordinator` says otherwise; stopped after the case. */
  member(streamPrefix: string, memberId: string, options: EdgeMemberOptions) {
    const member = new CoordinatedMember<EdgePayload>(this.redis.client(), {
      streamPrefix,
      consumerGroup: 'group',
      memberId,
      ...options,
      coordinator: { heartbeatIntervalMs: 100, ...options.coordinator },
    } as CoordinatedMemberOptions<EdgePayload>);
    member.on('error', (error) => this.errors.push(`${memberId}: ${error.message} (${(error.cause as Error | undefined)?.message})`));
    this.onEnd(() => member.stop());
    return member;
  }
}

/** An entry's name across shards ("shard/id": stream ids repeat from shard to shard). */
export const entryOf = (entry: { shardIndex: number; id: string }): string => `${entry.shardIndex}/${entry.id}`;

/** Counts each entry's successful runs, by `entryOf`. */
export class Handled {
  readonly runs = new Map<string, number>();

  add(message: StreamMessage<EdgePayload>): void {
    this.runs.set(entryOf(message), (this.runs.get(entryOf(message)) ?? 0) + 1);
  }

  async all(ids: readonly string[], timeoutMs = 15_000): Promise<void> {
    await pollUntil(`${ids.length} entries handled`, async () => ids.every((id) => this.runs.has(id)), { timeoutMs }).catch(
      (error: Error) => {
        throw new Error(`${error.message}: ${ids.filter((id) => !this.runs.has(id)).length} not handled`);
      },
    );
  }

  /** Each entry handled exactly once (no fault in a hand-off run explains a second run). */
  once(ids: readonly string[]): void {
    expect(ids.filter((id) => this.runs.get(id) !== 1)).toEqual([]);
  }
}

/** `count` keyed entries (`k0`…`k4`, sequence numbers from `from`); resolves with their `entryOf` names. */
export async function produce(producer: StreamProducer, count: number, from = 0): Promise<string[]> {
  const results = await producer.sendBatch(
    Array.from({ length: count }, (_, i) => ({ key: `k${(from + i) % 5}`, payload: { seq: from + i } })),
  );
  return results.map(entryOf);
}

/** Every shard of the group read to its end, nothing pending, the group STABLE; on timeout, says what was not. */
export async function drained(admin: CoordinatorAdmin, streamPrefix: string, timeoutMs = 15_000): Promise<void> {
  let last = '';
  await pollUntil(
    'nothing pending or unread, the group STABLE',
    async () => {
      const d = await admin.describeGroup(streamPrefix, 'group');
      const open = d.shards.filter((s) => s.pending > 0 || s.lag > 0);
      last = `${d.group.state}; ${open.map((s) => `shard ${s.shardIndex} pending ${s.pending} lag ${s.lag}`).join(', ')}`;
      return d.group.state === 'STABLE' && open.length === 0;
    },
    { timeoutMs },
  ).catch((error: Error) => {
    throw new Error(`${error.message} (${last})`);
  });
}

export interface HandOffSettings {
  /** The options of member `a` and member `b` (the same by default); the run's handler counts what they handle. */
  member?: (memberId: 'a' | 'b') => Omit<Partial<CoordinatedMemberOptions<EdgePayload>>, 'handler'>;
  producer?: Partial<StreamProducerOptions>;
  coordinator?: CoordinatorOptions;
  shardCount?: number;
  /** What the handler does before the entry counts as handled (e.g. `message.ack()` in ackMode 'manual'). */
  work?: (message: StreamMessage<EdgePayload>) => unknown;
  /** 'error' events the run expects (each must match one of these); default none. */
  errors?: RegExp;
  /** Called once both members run, before the second writes (a resize, a check of the stream). */
  whileBoth?: (run: HandOffRun) => Promise<void>;
}

export interface HandOffRun {
  streamPrefix: string;
  admin: CoordinatorAdmin;
  producer: StreamProducer;
  members: Record<'a' | 'b', CoordinatedMember<EdgePayload>>;
  handled: Handled;
}

/**
 * The hand-off run: member a joins and owns every shard and handles what is written; member b joins
 * and the shards are shared (a rebalance: revocations, claims, takeovers); both handle what is
 * written; a stops gracefully within STOP_BOUND_MS and b takes its shards over and handles what is
 * written; at the end nothing is pending or unread, every entry was handled exactly once and no
 * member reported an error the settings do not expect.
 */
export async function handOff(env: EdgeEnv, settings: HandOffSettings = {}): Promise<HandOffRun> {
  const streamPrefix = uniqueName('edge');
  const shardCount = settings.shardCount ?? 4;
  const admin = env.admin(settings.coordinator);
  await admin.createStream({ streamPrefix, shardCount });
  const producer = new StreamProducer(env.redis.client(), { streamPrefix, ...settings.producer });
  const handled = new Handled();
  const start = async (memberId: 'a' | 'b') => {
    const member = env.member(streamPrefix, memberId, {
      coordinator: settings.coordinator,
      handler: async (message: StreamMessage<EdgePayload>) => {
        await settings.work?.(message);
        handled.add(message);
      },
      ...settings.member?.(memberId),
    });
    await member.start();
    return member;
  };
  const ids: string[] = [];
  const write = async () => {
    const written = await produce(producer, 20, ids.length);
    ids.push(...written);
    await handled.all(ids);
  };
  const a = await start('a');
  await pollUntil('a owns every shard', async () => a.ownedShards().length === shardCount, { timeoutMs: 15_000 });
  await write();
  const b = await start('b');
  const run: HandOffRun = { streamPrefix, admin, producer, members: { a, b }, handled };
  await pollUntil(
    'the group STABLE with a and b owning every shard between them',
    async () => {
      const d = await admin.describeGroup(streamPrefix, 'group');
      const owners = new Set(d.shards.map((s) => s.owner));
      return d.group.state === 'STABLE' && d.shards.every((s) => s.owner === 'a' || s.owner === 'b') && owners.size > 0;
    },
    { timeoutMs: 15_000 },
  );
  await settings.whileBoth?.(run);
  await write();
  const stopping = performance.now();
  await a.stop();
  expect(performance.now() - stopping, "a's graceful stop()").toBeLessThan(STOP_BOUND_MS);
  // Every shard of the stream now (a `whileBoth` may have resized it).
  await pollUntil('b owns every shard', async () => b.ownedShards().length === (await admin.describeStream(streamPrefix))?.shardCount, {
    timeoutMs: 15_000,
  });
  await write();
  await drained(admin, streamPrefix);
  handled.once(ids);
  const unexpected = env.errors.filter((e) => !settings.errors?.test(e));
  expect(unexpected).toEqual([]);
  return run;
}
