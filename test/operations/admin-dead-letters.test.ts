import { describe, expect, it } from 'vitest';
import {
  CoordinatorAdmin,
  DeadLetterReplayError,
  KeyBuilder,
  REPLAY_HEADER,
  StreamProducer,
  shardForKey,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { type CommandVerdict, failing, hookCommands, isScriptOn } from '../support/command-hooks';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// docs/operations.md, Dead letters: dead letters can be listed, shown, replayed to their key and purged, twice safely.
const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const keys = new KeyBuilder();
const admin = () => new CoordinatorAdmin(redis.client());

interface Poison extends KeyedPayload {
  poison?: string;
}

/**
 * A stream of `shardCount` shards whose group "group" dead-letters every entry with a `poison`
 * payload (error `Error: <poison>`, one attempt) and handles the rest; returns once all `entries`
 * are handled or dead-lettered, with the member stopped.
 */
async function withDeadLetters(shardCount: number, entries: { key: string; payload: Poison }[]) {
  const streamPrefix = uniqueName('dlq');
  const member = aMember({
    streamPrefix,
    shardCount,
    maxAttempts: 1,
    handler: (message: StreamMessage<KeyedPayload>) => {
      const poison = (message.payload as Poison).poison;
      if (poison) throw new Error(poison);
    },
  });
  await member.start();
  const written = await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
    entries.map((e) => ({ ...e, headers: { origin: 'test' } })),
  );
  const poisoned = entries.filter((e) => e.payload.poison).length;
  await pollUntil(
    'every poisoned entry dead-lettered',
    async () => (await admin().readDeadLetters(streamPrefix, 'group')).length === poisoned,
  );
  await pollUntil('every entry acknowledged', async () =>
    (await admin().describeGroup(streamPrefix, 'group')).shards.every((s) => s.backlog === 0),
  );
  await member.stop();
  return { streamPrefix, written };
}

async function shardEntries(streamPrefix: string, shardIndex: number) {
  return redis.client().xrange(keys.shardStream(streamPrefix, shardIndex), '-', '+');
}

describe('listing dead letters', () => {
  it('lists reason, attempts, original shard, id and key, oldest first, filtered by key, error, shard and time', async () => {
    const { streamPrefix, written } = await withDeadLetters(3, [
      { key: 'a', payload: { seq: 1, poison: 'bad a' } },
      { key: 'b', payload: { seq: 2, poison: 'timeout b' } },
      { key: 'c', payload: { seq: 3 } },
      { key: 'd', payload: { seq: 4, poison: 'timeout d' } },
    ]);
    const all = await admin().readDeadLetters(streamPrefix, 'group');
    expect(all.map((l) => [l.key, l.error, l.attempts, l.shardIndex, l.entryId]).sort()).toEqual([
      ['a', 'Error: bad a', 1, shardForKey('a', 3), written[0].id],
      ['b', 'Error: timeout b', 1, shardForKey('b', 3), written[1].id],
      ['d', 'Error: timeout d', 1, shardForKey('d', 3), written[3].id],
    ]);
    for (const letter of all) expect(letter.ref).toBe(`${letter.shardIndex}/${letter.deadLetterId}`);

    expect((await admin().readDeadLetters(streamPrefix, 'group', { key: 'b' })).map((l) => l.key)).toEqual(['b']);
    expect((await admin().readDeadLetters(streamPrefix, 'group', { errorContains: 'timeout' })).map((l) => l.key).sort()).toEqual([
      'b',
      'd',
    ]);
    const onShard = await admin().readDeadLetters(streamPrefix, 'group', { shardIndex: shardForKey('a', 3) });
    expect(onShard.every((l) => l.shardIndex === shardForKey('a', 3))).toBe(true);
    expect(onShard.map((l) => l.key)).toContain('a');
    expect(await admin().readDeadLetters(streamPrefix, 'group', { since: Date.now() + 60_000 })).toEqual([]);
    expect(await admin().readDeadLetters(streamPrefix, 'group', { until: 0 })).toEqual([]);
    expect(await admin().readDeadLetters(streamPrefix, 'group', { count: 1 })).toEqual([all[0]]);

    expect(await admin().showDeadLetter(streamPrefix, 'group', all[1].ref)).toEqual(all[1]);
    expect(await admin().showDeadLetter(streamPrefix, 'group', `${all[1].shardIndex}/1-0`)).toBeNull();
    await expect(admin().showDeadLetter(streamPrefix, 'group', 'nonsense')).rejects.toThrow(/dead letter ref "nonsense" is invalid/);
    await expect(admin().readDeadLetters(streamPrefix, 'group', { shardIndex: -1 })).rejects.toThrow(
      /shardIndex must be an integer from 0 to 8191, got -1/,
    );
  });
});

describe('replaying dead letters', () => {
  it("writes the entry to its key again, after the key's newer entries, with its headers and payload, then deletes the dead letter; a second run finds it gone", async () => {
    const { streamPrefix, written } = await withDeadLetters(2, [
      { key: 'k', payload: { seq: 1, poison: 'first fails' } },
      { key: 'k', payload: { seq: 2 } },
    ]);
    const [letter] = await admin().readDeadLetters(streamPrefix, 'group');
    const replay = await admin().replayDeadLetter(streamPrefix, 'group', letter.ref);
    expect(replay).toMatchObject({ ref: letter.ref, status: 'replayed', to: { shardIndex: shardForKey('k', 2) } });

    const shard = await shardEntries(streamPrefix, shardForKey('k', 2));
    // Per-key order for replays: the replay comes after the key's newer entry (seq 2).
    expect(shard.map(([id]) => id)).toEqual([written[0].id, written[1].id, replay.to!.id]);
    const fields = new Map<string, string>();
    for (let i = 0; i < shard[2][1].length; i += 2) fields.set(shard[2][1][i], shard[2][1][i + 1]);
    expect(JSON.parse(fields.get('p')!)).toEqual({ seq: 1, poison: 'first fails' });
    expect(fields.get('k')).toBe('k');
    expect(JSON.parse(fields.get('h')!)).toEqual({
      origin: 'test',
      [REPLAY_HEADER.of]: letter.ref,
      [REPLAY_HEADER.group]: 'group',
      [REPLAY_HEADER.originalId]: written[0].id,
    });
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toEqual([]);

    // Safe to run twice: nothing is written again.
    expect(await admin().replayDeadLetter(streamPrefix, 'group', letter.ref)).toEqual({ ref: letter.ref, status: 'gone' });
    expect(await shardEntries(streamPrefix, shardForKey('k', 2))).toHaveLength(3);
  });

  it('replays a filter in the order the entries were dead-lettered, and the rest stays', async () => {
    const { streamPrefix } = await withDeadLetters(1, [
      { key: 'x', payload: { seq: 1, poison: 'timeout 1' } },
      { key: 'y', payload: { seq: 2, poison: 'crash 2' } },
      { key: 'x', payload: { seq: 3, poison: 'timeout 3' } },
    ]);
    const results = await admin().replayDeadLetters(streamPrefix, 'group', { errorContains: 'timeout' });
    expect(results.map((r) => r.status)).toEqual(['replayed', 'replayed']);
    const replayed = (await shardEntries(streamPrefix, 0)).slice(3).map(([, f]) => JSON.parse(f[1]).seq);
    expect(replayed).toEqual([1, 3]);
    expect((await admin().readDeadLetters(streamPrefix, 'group')).map((l) => l.error)).toEqual(['Error: crash 2']);
    expect((await admin().replayDeadLetters(streamPrefix, 'group')).map((r) => r.status)).toEqual(['replayed']);
    expect(await admin().replayDeadLetters(streamPrefix, 'group')).toEqual([]);
  });

  it('a replay that stopped between its write and the delete is found by the next one and not written twice', async () => {
    const { streamPrefix } = await withDeadLetters(4, [{ key: 'crash', payload: { seq: 1, poison: 'no' } }]);
    const [letter] = await admin().readDeadLetters(streamPrefix, 'group');
    // A client on which the last step of a replay (deleting the dead letter) fails, as if the
    // process died right after the write landed.
    const crashing = redis.client();
    const crashingAdmin = new CoordinatorAdmin(crashing);
    await crashingAdmin.purgeDeadLetter(streamPrefix, 'group', '0/1-0'); // defines the scripts on the client
    const dropCommand = Object.keys(Object.getPrototypeOf(crashing))
      .concat(Object.keys(crashing))
      .find((name) => name.endsWith('_dropDeadLetter'))!;
    (crashing as unknown as Record<string, unknown>)[dropCommand] = () => Promise.reject(new Error('connection lost'));
    await expect(crashingAdmin.replayDeadLetter(streamPrefix, 'group', letter.ref)).rejects.toThrow(
      /replayed to shard \d+ id .*deleting the dead letter failed \(connection lost\).*replaying it again finds the write/,
    );
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toHaveLength(1);

    // Another replay at once: the first one's mark is fresh, so it waits rather than guess.
    await expect(admin().replayDeadLetter(streamPrefix, 'group', letter.ref)).rejects.toThrow(/another replay marked it \d+ ms ago/);
    // Once the mark may be taken over: the earlier write is found, not repeated.
    const again = await admin().replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 0 });
    expect(again).toMatchObject({ status: 'found-earlier-replay', to: { shardIndex: shardForKey('crash', 4) } });
    const copies = (await shardEntries(streamPrefix, shardForKey('crash', 4))).filter(
      ([, f]) => f.includes('k') && f[f.indexOf('h') + 1]?.includes(letter.ref),
    );
    expect(copies).toHaveLength(1);
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toEqual([]);
    expect(await redis.client().exists(keys.shardDeadLetterReplays(streamPrefix, letter.shardIndex, 'group'))).toBe(0);
  });

  it('an entry not written by a StreamProducer is reported not replayable and kept; replay-all goes on past it', async () => {
    const { streamPrefix } = await withDeadLetters(1, [{ key: 'ok', payload: { seq: 1, poison: 'later' } }]);
    const deadLetters = keys.shardDeadLetterStream(streamPrefix, 0, 'group');
    const foreign = await redis
      .client()
      .xadd(
        deadLetters,
        '*',
        'shardIndex',
        '0',
        'entryId',
        '1-1',
        'memberId',
        'm',
        'error',
        'no p',
        'attempts',
        '0',
        'fields',
        '["x","1"]',
      );
    const results = await admin().replayDeadLetters(streamPrefix, 'group');
    expect(results.map((r) => r.status)).toEqual(['replayed', 'not-replayable']);
    expect(results[1].reason).toMatch(/no "p" field: it was not written by a StreamProducer; purge it/);
    expect((await admin().readDeadLetters(streamPrefix, 'group')).map((l) => l.deadLetterId)).toEqual([foreign]);
  });

  it('a replay of many stops at the first write that fails, so that no later entry of its key overtakes it', async () => {
    const { streamPrefix } = await withDeadLetters(1, [
      { key: 'z', payload: { seq: 1, poison: 'one' } },
      { key: 'z', payload: { seq: 2, poison: 'two' } },
    ]);
    // The shard stream cannot take the write (WRONGTYPE): Redis says no, so nothing was written.
    const shard = keys.shardStream(streamPrefix, 0);
    await redis.client().rename(shard, `${shard}:aside`);
    await redis.client().set(shard, 'not a stream');
    const error = await admin()
      .replayDeadLetters(streamPrefix, 'group')
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    await redis.client().del(shard);
    await redis.client().rename(`${shard}:aside`, shard);
    expect(error).toBeInstanceOf(DeadLetterReplayError);
    const failure = error as DeadLetterReplayError;
    expect(failure.results).toEqual([]);
    expect(failure.message).toMatch(
      /replayed 0 of 2 dead letters, then stopped at 0\/\S+ \(so that no later entry of its key overtakes it\): .*the replay was not written \(.*WRONGTYPE/,
    );
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toHaveLength(2);
    // Nothing was written for the one that failed: its mark is freed, a retry goes ahead at once.
    expect((await admin().replayDeadLetters(streamPrefix, 'group')).map((r) => r.status)).toEqual(['replayed', 'replayed']);
    expect((await shardEntries(streamPrefix, 0)).slice(2).map(([, f]) => JSON.parse(f[1]).seq)).toEqual([1, 2]);
  });
});

/** The group "group" reads every entry of the shard and acknowledges them (a member handling them). */
async function handleAll(streamPrefix: string, shardIndex: number): Promise<string[]> {
  const stream = keys.shardStream(streamPrefix, shardIndex);
  const reply = (await redis.client().xreadgroup('GROUP', 'group', 'by-hand', 'COUNT', 1000, 'STREAMS', stream, '>')) as
    | [string, [string, string[]][]][]
    | null;
  const ids = (reply?.[0][1] ?? []).map(([id]) => id);
  if (ids.length > 0) await redis.client().xack(stream, 'group', ...ids);
  return ids;
}

/** Copies of a dead letter's entry written by replays, in the shard stream now. */
async function replayCopies(streamPrefix: string, shardIndex: number, ref: string) {
  return (await shardEntries(streamPrefix, shardIndex)).filter(([, f]) => f[f.indexOf('h') + 1]?.includes(ref));
}

/** Makes a client's commands that `matches` picks land in Redis while their replies are lost. */
function loseReplies(client: ReturnType<typeof redis.client>, matches: (name: string, args: string[]) => boolean) {
  const other = redis.client();
  let lost = 0;
  hookCommands(client, async (name, args): Promise<CommandVerdict> => {
    if (lost > 0 || !matches(name, args)) return 'send';
    lost++;
    await other.call(name, ...args);
    return new Error('connection lost');
  });
}

describe('a replay run again after failures (SPEC 10.6)', () => {
  it('finds the write of a replay whose delete failed, even after the group handled it and trim deleted it', async () => {
    const { streamPrefix } = await withDeadLetters(2, [{ key: 'kept', payload: { seq: 1, poison: 'no' } }]);
    const [letter] = await admin().readDeadLetters(streamPrefix, 'group');
    const target = shardForKey('kept', 2);
    const client = redis.client();
    hookCommands(
      client,
      failing(
        (name, args) => isScriptOn(name, args, keys.shardDeadLetterStream(streamPrefix, letter.shardIndex, 'group')) && args.length === 5,
        1,
      ),
    );
    await expect(new CoordinatorAdmin(client).replayDeadLetter(streamPrefix, 'group', letter.ref)).rejects.toThrow(
      /deleting the dead letter failed/,
    );
    expect(await replayCopies(streamPrefix, target, letter.ref)).toHaveLength(1);

    // The group handles the replayed entry, and retention deletes what every group has handled.
    expect(await handleAll(streamPrefix, target)).toHaveLength(1);
    await admin().trim(streamPrefix);
    expect(await replayCopies(streamPrefix, target, letter.ref)).toHaveLength(0);

    const again = await admin().replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 0 });
    expect(again).toMatchObject({ status: 'found-earlier-replay', to: { shardIndex: target } });
    expect(await handleAll(streamPrefix, target)).toEqual([]); // not written twice
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toEqual([]);
    // The records go with the dead letter: nothing is left behind.
    expect(await redis.client().exists(keys.shardReplayRecords(streamPrefix, target, 'group'))).toBe(0);
    expect(await redis.client().exists(keys.shardDeadLetterReplays(streamPrefix, letter.shardIndex, 'group'))).toBe(0);
  });

  it('a purge after a replay whose delete failed removes the replay record with the dead letter', async () => {
    const { streamPrefix } = await withDeadLetters(2, [{ key: 'purged', payload: { seq: 1, poison: 'no' } }]);
    const [letter] = await admin().readDeadLetters(streamPrefix, 'group');
    const target = shardForKey('purged', 2);
    const client = redis.client();
    const deadLetters = keys.shardDeadLetterStream(streamPrefix, letter.shardIndex, 'group');
    // The drop is the dead letter's only 5-argument script call (sha, 2 keys, id).
    hookCommands(
      client,
      failing((name, args) => isScriptOn(name, args, deadLetters) && args.length === 5),
    );
    await expect(new CoordinatorAdmin(client).replayDeadLetter(streamPrefix, 'group', letter.ref)).rejects.toThrow(
      /deleting the dead letter failed/,
    );
    expect(await redis.client().hget(keys.shardReplayRecords(streamPrefix, target, 'group'), letter.ref)).not.toBeNull();

    expect(await admin().purgeDeadLetter(streamPrefix, 'group', letter.ref)).toEqual({ ref: letter.ref, purged: true });
    expect(await redis.client().exists(keys.shardReplayRecords(streamPrefix, target, 'group'))).toBe(0);
  });

  it('a replay whose write lands after a take-over finished does not write it again: the record outlives the dead letter', async () => {
    const { streamPrefix } = await withDeadLetters(2, [{ key: 'slow', payload: { seq: 1, poison: 'no' } }]);
    const [letter] = await admin().readDeadLetters(streamPrefix, 'group');
    const target = shardForKey('slow', 2);
    const shard = keys.shardStream(streamPrefix, target);
    const before = await redis.client().xlen(shard);
    // Replay A's write (replayEntry on the target shard) sits on a slow link until B is done.
    let releaseA!: () => void;
    const aHeld = new Promise<void>((resolve) => (releaseA = resolve));
    let aArrived!: () => void;
    const aAtWrite = new Promise<void>((resolve) => (aArrived = resolve));
    const clientA = redis.client();
    hookCommands(clientA, async (name, args): Promise<CommandVerdict> => {
      if (isScriptOn(name, args, shard)) {
        aArrived();
        await aHeld;
      }
      return 'send';
    });
    const a = new CoordinatorAdmin(clientA).replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 200 });
    await aAtWrite;
    await new Promise((resolve) => setTimeout(resolve, 250)); // past takeOverAfterMs: B takes A's mark over
    const b = await admin().replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 200 });
    expect(b.status).toBe('replayed');
    releaseA();
    expect((await a).status).toBe('found-earlier-replay');
    expect(await redis.client().xlen(shard)).toBe(before + 1);
  });

  it('a purge does not reopen it: a replay write in flight while a purge removes the record is not written twice', async () => {
    const { streamPrefix } = await withDeadLetters(2, [{ key: 'purged-slow', payload: { seq: 1, poison: 'no' } }]);
    const [letter] = await admin().readDeadLetters(streamPrefix, 'group');
    const target = shardForKey('purged-slow', 2);
    const shard = keys.shardStream(streamPrefix, target);
    const before = await redis.client().xlen(shard);
    let releaseA!: () => void;
    const aHeld = new Promise<void>((resolve) => (releaseA = resolve));
    let aArrived!: () => void;
    const aAtWrite = new Promise<void>((resolve) => (aArrived = resolve));
    const clientA = redis.client();
    hookCommands(clientA, async (name, args): Promise<CommandVerdict> => {
      if (isScriptOn(name, args, shard)) {
        aArrived();
        await aHeld;
      }
      return 'send';
    });
    const a = new CoordinatorAdmin(clientA).replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 200 });
    await aAtWrite;
    await new Promise((resolve) => setTimeout(resolve, 250));
    // Replay B takes over and writes, but its delete fails: the dead letter stays, then is purged.
    const clientB = redis.client();
    const deadLetters = keys.shardDeadLetterStream(streamPrefix, letter.shardIndex, 'group');
    hookCommands(
      clientB,
      failing((name, args) => isScriptOn(name, args, deadLetters) && args.length === 5),
    );
    await expect(
      new CoordinatorAdmin(clientB).replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 200 }),
    ).rejects.toThrow(/deleting the dead letter failed/);
    expect(await admin().purgeDeadLetter(streamPrefix, 'group', letter.ref)).toEqual({ ref: letter.ref, purged: true });
    releaseA();
    await a.catch(() => undefined);
    expect(await redis.client().xlen(shard)).toBe(before + 1);
  });

  it('finds the write of a replay whose reply was lost, after the group handled it and trim deleted it', async () => {
    const { streamPrefix } = await withDeadLetters(2, [{ key: 'lost', payload: { seq: 1, poison: 'no' } }]);
    const [letter] = await admin().readDeadLetters(streamPrefix, 'group');
    const target = shardForKey('lost', 2);
    const client = redis.client();
    loseReplies(client, (name, args) => isScriptOn(name, args, keys.shardStream(streamPrefix, target)));
    await expect(new CoordinatorAdmin(client).replayDeadLetter(streamPrefix, 'group', letter.ref)).rejects.toThrow(/got no reply/);
    expect(await replayCopies(streamPrefix, target, letter.ref)).toHaveLength(1);
    expect(await handleAll(streamPrefix, target)).toHaveLength(1);
    await admin().trim(streamPrefix);

    const again = await admin().replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 0 });
    expect(again).toMatchObject({ status: 'found-earlier-replay', to: { shardIndex: target } });
    expect(await handleAll(streamPrefix, target)).toEqual([]);
    expect(await redis.client().exists(keys.shardReplayRecords(streamPrefix, target, 'group'))).toBe(0);
  });

  it('a replay that took over a mark and failed while searching leaves the search of the next one as wide as the first mark', async () => {
    // A key that a growth 4 -> 8 moves to a new shard, empty but for the first replay's write.
    const key = Array.from({ length: 64 }, (_, i) => `moved-${i}`).find((k) => shardForKey(k, 8) >= 4)!;
    const { streamPrefix } = await withDeadLetters(4, [{ key, payload: { seq: 1, poison: 'no' } }]);
    const [letter] = await admin().readDeadLetters(streamPrefix, 'group');
    await admin().resizeShards(streamPrefix, 8, { ordered: false });
    const target = shardForKey(key, 8);
    // Replay 1, two minutes ago (as a replay that stopped after its write leaves it): its mark, and
    // its write, with the headers a replay writes.
    const [seconds] = await redis.client().time();
    const twoMinutesAgo = Number(seconds) * 1000 - 120_000;
    const fields = new Map<string, string>();
    for (let i = 0; i + 1 < letter.fields.length; i += 2) fields.set(letter.fields[i], letter.fields[i + 1]);
    const headers = {
      ...JSON.parse(fields.get('h') ?? '{}'),
      [REPLAY_HEADER.of]: letter.ref,
      [REPLAY_HEADER.group]: 'group',
      [REPLAY_HEADER.originalId]: letter.entryId,
    };
    await redis
      .client()
      .xadd(keys.shardStream(streamPrefix, target), `${twoMinutesAgo}-0`, 'p', fields.get('p')!, 'k', key, 'h', JSON.stringify(headers));
    await redis
      .client()
      .hset(keys.shardDeadLetterReplays(streamPrefix, letter.shardIndex, 'group'), letter.deadLetterId, twoMinutesAgo - 1000);

    // Replay 2 takes the mark over and fails while it looks for replay 1's write.
    const client = redis.client();
    hookCommands(
      client,
      failing((name, args) => args.includes(keys.shardStream(streamPrefix, target)) && name !== 'evalsha', Number.POSITIVE_INFINITY),
    );
    await expect(new CoordinatorAdmin(client).replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 0 })).rejects.toThrow(
      /connection lost/,
    );
    // Replay 3 still finds it.
    const third = await admin().replayDeadLetter(streamPrefix, 'group', letter.ref, { takeOverAfterMs: 0 });
    expect(third).toMatchObject({ status: 'found-earlier-replay', to: { shardIndex: target, id: `${twoMinutesAgo}-0` } });
    expect(await replayCopies(streamPrefix, target, letter.ref)).toHaveLength(1);
  });
});

describe('purging dead letters', () => {
  it('purges one, a filter, or all; purging again changes nothing', async () => {
    const { streamPrefix } = await withDeadLetters(2, [
      { key: 'a', payload: { seq: 1, poison: 'x1' } },
      { key: 'b', payload: { seq: 2, poison: 'y2' } },
      { key: 'c', payload: { seq: 3, poison: 'y3' } },
    ]);
    const [first] = await admin().readDeadLetters(streamPrefix, 'group', { key: 'a' });
    expect(await admin().purgeDeadLetter(streamPrefix, 'group', first.ref)).toEqual({ ref: first.ref, purged: true });
    expect(await admin().purgeDeadLetter(streamPrefix, 'group', first.ref)).toEqual({ ref: first.ref, purged: false });
    expect((await admin().purgeDeadLetters(streamPrefix, 'group', { key: 'b' })).map((r) => r.purged)).toEqual([true]);
    expect((await admin().readDeadLetters(streamPrefix, 'group')).map((l) => l.key)).toEqual(['c']);
    expect((await admin().purgeDeadLetters(streamPrefix, 'group')).map((r) => r.purged)).toEqual([true]);
    expect(await admin().purgeDeadLetters(streamPrefix, 'group')).toEqual([]);
  });
});

describe("a shrink's deleted shards", () => {
  it('keep their dead letters: deleteDrainedShards leaves them listed, shown, replayed and purged like any', async () => {
    // Keys of shards 2 and 3, which a shrink 4 -> 2 removes, and one of a surviving shard.
    const candidates = Array.from({ length: 64 }, (_, i) => `key-${i}`);
    const removed = candidates.filter((k) => shardForKey(k, 4) >= 2).slice(0, 3);
    const surviving = candidates.find((k) => shardForKey(k, 4) < 2)!;
    const { streamPrefix } = await withDeadLetters(4, [
      { key: removed[0], payload: { seq: 1, poison: 'removed 1' } },
      { key: removed[1], payload: { seq: 2, poison: 'removed 2' } },
      { key: removed[2], payload: { seq: 3, poison: 'removed 3' } },
      { key: surviving, payload: { seq: 4, poison: 'surviving' } },
    ]);
    const before = await admin().readDeadLetters(streamPrefix, 'group');
    const onRemoved = before.filter((l) => l.shardIndex >= 2);
    expect(onRemoved).toHaveLength(3);

    // Shrink to 2 with a member that drains the removed shards, then delete them.
    const member = aMember({ streamPrefix, shardCount: 2, sessionTimeoutMs: 1000, cutoverCheckIntervalMs: 50, handler: () => undefined });
    await member.start();
    await admin().resizeShards(streamPrefix, 2, { graceMs: 200, switchDelayMs: 150 });
    const deleted = await pollUntil(
      'the removed shards deleted',
      async () => {
        const statuses = await admin().cutoverStatus(streamPrefix);
        if (statuses.some((status) => status.cutover !== null)) return false;
        return admin()
          .deleteDrainedShards(streamPrefix)
          .then(
            (shards) => shards.length > 0 && shards,
            () => false,
          );
      },
      { timeoutMs: 20_000 },
    );
    expect(deleted).toEqual([2, 3]);
    expect(await redis.client().exists(keys.shardStream(streamPrefix, 3))).toBe(0);
    expect(await admin().describeStream(streamPrefix)).toMatchObject({ shardCount: 2, shardSpan: 2, deadLetterSpan: 4 });

    // Still there, by list, filter and ref.
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toEqual(before);
    expect((await admin().readDeadLetters(streamPrefix, 'group', { shardIndex: onRemoved[0].shardIndex })).map((l) => l.ref)).toContain(
      onRemoved[0].ref,
    );
    expect(await admin().showDeadLetter(streamPrefix, 'group', onRemoved[0].ref)).toEqual(onRemoved[0]);
    // A replay writes the entry to its key's shard now, a surviving one.
    const replayed = await admin().replayDeadLetter(streamPrefix, 'group', onRemoved[0].ref);
    expect(replayed).toMatchObject({ status: 'replayed', to: { shardIndex: shardForKey(onRemoved[0].key!, 2) } });
    // Purged by ref and by filter; a second purge finds nothing.
    expect(await admin().purgeDeadLetter(streamPrefix, 'group', onRemoved[1].ref)).toEqual({ ref: onRemoved[1].ref, purged: true });
    expect((await admin().purgeDeadLetters(streamPrefix, 'group', { errorContains: 'removed' })).map((r) => r.ref)).toEqual([
      onRemoved[2].ref,
    ]);
    expect((await admin().readDeadLetters(streamPrefix, 'group')).map((l) => l.error)).toEqual(['Error: surviving']);
    expect(await admin().purgeDeadLetters(streamPrefix, 'group', { errorContains: 'removed' })).toEqual([]);
  }, 30_000);
});
