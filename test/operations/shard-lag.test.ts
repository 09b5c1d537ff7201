import { describe, expect, it } from 'vitest';
import { KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { findGroupInfo } from '../../packages/core/src/redis/responses';
import { aGroup } from '../support/group-fixture';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const keys = new KeyBuilder();

/**
 * Redis before 7.4 miscounts a group's lag once its stream was trimmed past the group's
 * last-delivered id and the group read on (redis/redis#13957): XINFO GROUPS keeps reporting entries
 * the group was delivered and acknowledged. Retention trims exactly so, and the soak saw
 * deleteDrainedShards refuse a drained shard for good ("still holds 2358 entries … not processed").
 */
async function trimmedPastTheGroup(streamPrefix: string, consumerGroup: string): Promise<string> {
  const client = redis.client();
  const stream = keys.shardStream(streamPrefix, 0);
  const producer = new StreamProducer(client, { streamPrefix });
  for (let seq = 1; seq <= 5; seq++) await producer.send({ shardIndex: 0, payload: { seq } });
  // The member's claim of the shard created the group at 0 already; created here otherwise.
  await client.xgroup('CREATE', stream, consumerGroup, '0').catch((error: Error) => expect(error.message).toMatch(/BUSYGROUP/));
  const first = (await client.xreadgroup('GROUP', consumerGroup, 'c', 'COUNT', 1, 'STREAMS', stream, '>')) as [
    string,
    [string, string[]][],
  ][];
  await client.xtrim(stream, 'MAXLEN', 1);
  const rest = (await client.xreadgroup('GROUP', consumerGroup, 'c', 'COUNT', 10, 'STREAMS', stream, '>')) as [
    string,
    [string, string[]][],
  ][];
  await client.xack(stream, consumerGroup, ...[...first[0][1], ...rest[0][1]].map(([id]) => id));
  return stream;
}

describe("a group's lag on a shard", () => {
  it("is 0 once the group was delivered the shard's last entry, whatever XINFO GROUPS says after a trim", async () => {
    const group = await aGroup(redis, 1);
    await group.member('a').join();
    const stream = await trimmedPastTheGroup(group.streamPrefix, group.consumerGroup);
    const said = findGroupInfo(await redis.client().xinfo('GROUPS', stream), group.consumerGroup);
    // What Redis itself says (7.0): the premise of the test. Redis 7.4 and later say 0 here.
    expect(said?.pending).toBe(0);
    const [shard] = (await group.describe()).shards;
    expect({ lag: shard.lag, pending: shard.pending, backlog: shard.backlog }).toEqual({ lag: 0, pending: 0, backlog: 0 });
  });

  it('is at least 1 while an entry after the last-delivered id waits', async () => {
    const group = await aGroup(redis, 1);
    await group.member('a').join();
    await trimmedPastTheGroup(group.streamPrefix, group.consumerGroup);
    await new StreamProducer(redis.client(), { streamPrefix: group.streamPrefix }).send({ shardIndex: 0, payload: { seq: 6 } });
    const [shard] = (await group.describe()).shards;
    expect(shard.lag).toBeGreaterThanOrEqual(1);
  });
});
