import { CoordinatorAdmin, KeyBuilder, type StreamMessage } from '@redis-stream-coordinator/core';
import { shardForKey } from '../../packages/core/src/producer/key-hash';
import { hookCommands, isScriptOn } from '../support/command-hooks';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, type useRedisServer } from '../support/vitest-redis';

// Fixtures of the attack tests on the givers' bound (delayed-resize-givers-*.test.ts), as in
// delayed-resize.test.ts: a stream, keys routed as wanted, a recorder, and a member whose release
// calls on one schedule fail until told otherwise.

export const BLOCK_MS = 300;
export const keys = new KeyBuilder();

/** The first key whose shard under each count of `counts` is `shards[i]` (undefined: any). */
export function keyRouted(counts: number[], shards: (number | undefined)[]): string {
  for (let i = 0; ; i++) {
    const key = `key-${i}`;
    if (counts.every((c, j) => shards[j] === undefined || shardForKey(key, c) === shards[j])) return key;
  }
}

/** A handler that records each entry's key, seq and shard, in the order handled. */
export function recorder() {
  const seen: { key: string | undefined; seq: number; shardIndex: number }[] = [];
  return {
    seen,
    handler: (message: StreamMessage<KeyedPayload>) => {
      seen.push({ key: message.key, seq: message.payload.seq, shardIndex: message.shardIndex });
    },
    seqsOf: (key: string) => seen.filter((s) => s.key === key).map((s) => s.seq),
  };
}

export function giversFixtures(redis: ReturnType<typeof useRedisServer>) {
  const aMember = memberFactory(redis, { blockMs: BLOCK_MS });
  return {
    aMember,
    async aStream(shardCount: number, label: string): Promise<string> {
      const streamPrefix = uniqueName(label);
      await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
      return streamPrefix;
    },
    async redisNow(): Promise<number> {
      const [seconds, micros] = await redis.client().time();
      return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    },
    async streamSeqs(streamPrefix: string, shardIndex: number): Promise<number[]> {
      const entries = await redis.client().xrange(keys.shardStream(streamPrefix, shardIndex), '-', '+');
      return entries.map(([, fields]) => (JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload).seq);
    },
    /**
     * A member owning every shard whose release calls on `schedule` fail until `slow.releasesFrom`;
     * `log` sees every command, and fails it by answering an Error.
     */
    async slowReleaser(streamPrefix: string, schedule: string, shards: number, log?: (name: string, args: string[]) => Error | undefined) {
      const slow = { releasesFrom: Number.POSITIVE_INFINITY };
      const connection = redis.client();
      hookCommands(connection, (name, args) => {
        const failed = log?.(name, args);
        if (failed) return failed;
        return isScriptOn(name, args, schedule) && args[1] === '8' && Date.now() < slow.releasesFrom
          ? new Error('connection lost')
          : 'send';
      });
      const recorded = recorder();
      const member = aMember({ streamPrefix, handler: recorded.handler, cutoverCheckIntervalMs: 50, sessionTimeoutMs: 3000 }, connection);
      await member.start();
      await pollUntil('every shard owned', async () => member.ownedShards().length === shards, { timeoutMs: 10_000 });
      return { slow, recorded, member };
    },
  };
}
