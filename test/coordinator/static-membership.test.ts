import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ErrorCode, type HeartbeatRequest, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { ShardClient } from '../../packages/core/src/redis/shard-client';
import { settle } from '@redis-stream-coordinator/core/testing';
import { aGroup, type GroupFixture, ownership } from '../support/group-fixture';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

// Static membership at the protocol level (docs/protocol.md, Static members; docs/runtime.md, Static membership).
const redis = useRedisServer();

/** One process of a static member: its memberId is the memberInstanceId, its instanceId its own. */
function anInstance(group: GroupFixture, memberInstanceId: string, instanceId: string, extra: Partial<HeartbeatRequest> = {}) {
  return group.member(memberInstanceId, { instanceId, staticMember: true, ...extra });
}

async function fourStaticMembers(options = {}) {
  const group = await aGroup(redis, 8, options);
  const members = ['a', 'b', 'c', 'd'].map((id) => anInstance(group, id, `${id}-1`));
  for (const member of members) await member.join();
  await settle(members);
  return { group, members };
}

describe('static membership', () => {
  it('a departed static member keeps its shards; its next instance takes them back with a new epoch and nobody else revokes', async () => {
    const { group, members } = await fourStaticMembers();
    const [a, b, c, d] = members;
    const before = ownership(await group.describe());
    const oldEpoch = b.memberEpoch;
    const commits = async () =>
      (await group.admin.readGroupEvents(group.streamPrefix, group.consumerGroup)).filter((e) => e.type === 'TARGET_COMMITTED').length;
    const commitsBefore = await commits();

    expect((await b.leave()).errorCode).toBe(ErrorCode.NONE); // stop(): a static member departs
    const away = await group.describe();
    expect(ownership(away)).toEqual(before); // still ACTIVE, still holding its shards
    expect(away.group.state).toBe('STABLE');
    // describeGroup names the static members and shows b departed, awaited until its lease ends.
    expect(away.members.map((m) => m.memberInstanceId)).toEqual(['a', 'b', 'c', 'd']);
    const awayB = away.members.find((m) => m.memberId === 'b')!;
    expect(awayB).toMatchObject({ state: 'ACTIVE', awaitedUntil: awayB.memberLeaseExpiresAt });
    expect(Date.parse(awayB.departedAt!)).toBeLessThan(Date.parse(awayB.awaitedUntil!));
    expect(away.members.filter((m) => m.memberId !== 'b').map((m) => [m.departedAt, m.awaitedUntil])).toEqual([
      [null, null],
      [null, null],
      [null, null],
    ]);
    for (const other of [a, c, d]) expect((await other.heartbeat()).revokeShards).toEqual([]);

    const next = anInstance(group, 'b', 'b-2');
    const joined = await next.join();
    expect(joined.errorCode).toBe(ErrorCode.NONE);
    expect(joined.memberEpoch).toBeGreaterThan(oldEpoch); // its fencing tokens outrank the old instance's
    expect(joined.assignedShards).toEqual(before.b);
    expect(joined.state).toBe('STABLE'); // no ASSIGNING round
    for (const other of [a, c, d]) {
      const answer = await other.heartbeat();
      expect(answer.revokeShards).toEqual([]);
      expect(answer.pendingShards).toEqual([]);
    }
    const back = await group.describe();
    expect(ownership(back)).toEqual(before);
    expect(back.members.find((m) => m.memberId === 'b')).toMatchObject({ memberInstanceId: 'b', departedAt: null, awaitedUntil: null });
    const types = (await group.admin.readGroupEvents(group.streamPrefix, group.consumerGroup)).map((event) => event.type);
    expect(types).toContain('MEMBER_AWAY');
    expect(types).toContain('MEMBER_STATIC_REJOINED');
    expect(await commits()).toBe(commitsBefore); // no new target was computed
  });

  it('the old instance is fenced for good after a takeover: its heartbeat and its rejoin are refused', async () => {
    const { group, members } = await fourStaticMembers({ heartbeatIntervalMs: 50 });
    const b = members[1];
    const oldView = b.request();
    // b's process crashes (no leave). While it still heartbeats a restart is refused ...
    const next = anInstance(group, 'b', 'b-2');
    const refused = await next.send({ memberEpoch: 0, owned: [], revoking: [], ackedRevocations: [] });
    expect(refused.errorCode).toBe(ErrorCode.FENCED_INSTANCE_ID);
    expect(refused.errorMessage).toMatch(/still heartbeats/);
    // ... and once it was silent for two heartbeat intervals, the restart takes over.
    await pollUntil('the takeover', async () => (await next.join()).errorCode === ErrorCode.NONE, { timeoutMs: 5000 });
    expect(next.owned).toEqual(oldView.owned);
    expect(next.memberEpoch).toBeGreaterThan(oldView.memberEpoch);

    const zombie = await b.send(oldView);
    expect(zombie.errorCode).toBe(ErrorCode.FENCED_MEMBER_EPOCH);
    const zombieRejoin = await b.send({ memberEpoch: 0, owned: [], revoking: [], ackedRevocations: [] });
    expect(zombieRejoin.errorCode).toBe(ErrorCode.FENCED_INSTANCE_ID);
    // Even with the new epoch (learnt somehow) the old instance is not taken for the new one.
    const forged = await b.send({ ...oldView, memberEpoch: next.memberEpoch });
    expect(forged.errorCode).toBe(ErrorCode.FENCED_INSTANCE_ID);
    expect((await next.heartbeat()).errorCode).toBe(ErrorCode.NONE);
  });

  it('shard fencing: after a takeover the old instance can neither ack nor dead-letter its entry; the new one runs it', async () => {
    const group = await aGroup(redis, 1, { heartbeatIntervalMs: 50 });
    const old = anInstance(group, 'z', 'z-1');
    await old.join();
    await settle([old]);
    const shardsOf = (instance: typeof old) => {
      const client = new ShardClient(redis.client(), new KeyBuilder(), group.streamPrefix, group.consumerGroup, 'z');
      client.setIncarnation(instance.last!.incarnation);
      return client;
    };
    const oldShards = shardsOf(old);
    expect((await oldShards.claimShard(0, old.memberEpoch)).claimed).toBe(true);
    const { id } = await new StreamProducer(redis.client(), { streamPrefix: group.streamPrefix }).send({ key: 'k', payload: { n: 1 } });
    const stream = new KeyBuilder().shardStream(group.streamPrefix, 0);
    const read = (await redis.client().xreadgroup('GROUP', group.consumerGroup, 'z', 'COUNT', 10, 'STREAMS', stream, '>')) as [
      string,
      [string, string[]][],
    ][];
    expect(read[0][1].map(([entryId]) => entryId)).toEqual([id]); // in flight at the old instance when it hangs

    const next = anInstance(group, 'z', 'z-2');
    await pollUntil('the takeover', async () => (await next.join()).errorCode === ErrorCode.NONE, { timeoutMs: 5000 });
    const nextShards = shardsOf(next);
    expect((await nextShards.claimShard(0, next.memberEpoch)).claimed).toBe(true);
    // The old instance wakes up and finishes its handler: refused, nothing written.
    expect(await oldShards.ack(0, old.memberEpoch, [id])).toEqual({ acked: -1 });
    const letter = { destination: group.consumerGroup, maxLen: 0, error: 'late', attempts: 1, cause: 'attempts-exhausted' };
    expect(await oldShards.deadLetter(0, old.memberEpoch, { id, fields: read[0][1][0][1] }, letter)).toBeNull();
    // Its old grant cannot win the shard back either.
    expect((await oldShards.claimShard(0, old.memberEpoch)).claimed).toBe(false);
    // The new instance takes the entry over (pending under the same member) and acknowledges it.
    const taken = await nextShards.claimPending(0, next.memberEpoch, 'all', '0-0', 10);
    expect(taken.fenced ? [] : taken.entries.map((e) => e.id)).toEqual([id]);
    expect(await nextShards.ack(0, next.memberEpoch, [id])).toEqual({ acked: 1 });
  });

  it('a static member that does not come back within its session timeout expires and its shards move', async () => {
    const group = await aGroup(redis, 4);
    const a = anInstance(group, 'a', 'a-1', { sessionTimeoutMs: 300 });
    const b = anInstance(group, 'b', 'b-1');
    await a.join();
    await b.join();
    await settle([a, b]);
    await a.leave();
    await pollUntil('a to expire and b to own everything', async () => {
      await b.heartbeat();
      return b.owned.length === 4;
    });
    const description = await group.describe();
    const expired = description.members.find((m) => m.memberId === 'a')!;
    expect(expired.state).toBe('EXPIRED');
    // No longer awaited: the wait ended with its session.
    expect(expired.awaitedUntil).toBeNull();
    expect(expired.departedAt).not.toBeNull();
  });

  it('a plain (non-static) leave still ends the membership at once', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a', { instanceId: 'a-1' });
    const b = group.member('b', { instanceId: 'b-1' });
    await a.join();
    await b.join();
    await settle([a, b]);
    await a.leave();
    expect((await group.describe()).members.find((m) => m.memberId === 'a')).toMatchObject({
      state: 'LEFT',
      memberInstanceId: null,
      departedAt: null,
      awaitedUntil: null,
    });
  });

  it('model: whatever the restarts, crashes and departures, no shard has two live owners and a replaced instance is never accepted again', async () => {
    type Op = { kind: 'restart' | 'beat' | 'depart' | 'crash'; member: number } | { kind: 'wait' } | { kind: 'settle' };
    const op = fc.oneof(
      fc.record({
        kind: fc.constantFrom('restart', 'restart', 'beat', 'depart', 'crash'),
        member: fc.integer({ min: 0, max: 2 }),
      }) as fc.Arbitrary<Op>,
      fc.constant<Op>({ kind: 'wait' }),
      fc.constant<Op>({ kind: 'settle' }), // every running instance heartbeats until the group is quiet
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 5, maxLength: 25 }), async (ops) => {
        run += 1;
        const ids = [0, 1, 2].map((i) => `r${run}-s${i}`);
        const group = await aGroup(redis, 6, { heartbeatIntervalMs: 20 }); // a fresh stream and group per run
        const member = (id: string, instance: string) =>
          group.member(id, { instanceId: instance, staticMember: true, sessionTimeoutMs: 2000 });
        // the instance holding each memberId as far as the model knows, and every instance replaced or departed
        const current = ids.map((id) => ({ instance: member(id, `${id}-0`), running: false, generation: 0 }));
        const retired: { instance: ReturnType<typeof member>; view: HeartbeatRequest }[] = [];
        const retiredEpoch = ids.map(() => 0);
        for (const step of ops) {
          if (step.kind === 'wait') {
            await new Promise((resolve) => setTimeout(resolve, 50));
          } else if (step.kind === 'settle') {
            for (let round = 0; round < 4; round++) {
              for (const slot of current.filter((s) => s.running)) {
                const answer = await slot.instance.heartbeat();
                if (answer.errorCode !== ErrorCode.NONE) await slot.instance.join();
              }
            }
          } else {
            const slot = current[step.member];
            if (step.kind === 'restart') {
              slot.generation += 1;
              const candidate = member(ids[step.member], `${ids[step.member]}-${slot.generation}`);
              const answer = await candidate.join();
              if (answer.errorCode === ErrorCode.NONE) {
                // taken over: whatever the old instance held is fenced from now on
                const view = slot.instance.request();
                retired.push({ instance: slot.instance, view });
                retiredEpoch[step.member] = Math.max(retiredEpoch[step.member], view.memberEpoch);
                slot.instance = candidate;
                slot.running = true;
              } else {
                // the old instance heartbeated moments ago (it runs, or crashed just now): a second
                // live process never gets the id
                expect(answer.errorCode).toBe(ErrorCode.FENCED_INSTANCE_ID);
              }
            } else if (step.kind === 'beat' && slot.running) {
              const answer = await slot.instance.heartbeat();
              expect(answer.errorCode).not.toBe(ErrorCode.FENCED_INSTANCE_ID);
              if (answer.errorCode !== ErrorCode.NONE) await slot.instance.join();
            } else if (step.kind === 'depart' && slot.running) {
              const view = slot.instance.request();
              expect((await slot.instance.leave()).errorCode).toBe(ErrorCode.NONE);
              retired.push({ instance: slot.instance, view });
              retiredEpoch[step.member] = Math.max(retiredEpoch[step.member], view.memberEpoch);
              slot.running = false;
            } else if (step.kind === 'crash') {
              slot.running = false;
            }
            // An accepted instance that holds shards has an epoch above every epoch an earlier
            // instance of its id held: its fencing tokens win over theirs on every shard.
            if (slot.running && slot.instance.owned.length > 0) {
              expect(slot.instance.memberEpoch).toBeGreaterThan(retiredEpoch[step.member]);
            }
          }
          // No shard in two running instances' hands.
          const held = current.filter((s) => s.running).flatMap((s) => s.instance.owned);
          expect(new Set(held).size).toBe(held.length);
          // A replaced or departed instance that comes back with what it held is refused.
          for (const { instance, view } of retired) {
            if (view.memberEpoch <= 0) continue;
            const answer = await instance.send(view);
            expect([ErrorCode.FENCED_INSTANCE_ID, ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID]).toContain(answer.errorCode);
          }
        }
      }),
      { numRuns: 15 },
    );
  }, 60_000);
});
