import { describe, expect, it } from 'vitest';
import { ErrorCode, type HeartbeatRequest, InvalidRequestError } from '@redis-stream-coordinator/core';
import { aGroup, type GroupFixture } from '../support/group-fixture';
import { pollUntil } from '../support/poll';
import { settle } from '@redis-stream-coordinator/core/testing';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const HOLD_ASSIGNING = { assignmentDelayMs: 3_600_000 };

/** Sends a request and checks that it was refused with `code` and changed nothing at all. */
async function expectRefused(
  group: GroupFixture,
  request: Partial<HeartbeatRequest> & { memberId: string },
  code: ErrorCode,
  message: RegExp,
) {
  const before = await group.describe();
  const response = await group.coordinator.heartbeat({
    streamPrefix: group.streamPrefix,
    consumerGroup: group.consumerGroup,
    memberEpoch: 1,
    ...request,
  });
  expect(response.errorCode).toBe(code);
  expect(response.errorMessage).toMatch(message);
  expect(await group.describe()).toEqual(before);
}

/** a owns all four shards; b joined and waits for 2 and 3, which a is still revoking. */
async function aHandoffInProgress() {
  const group = await aGroup(redis, 4);
  const a = group.member('a');
  await a.join();
  const b = group.member('b', {}, group.client(HOLD_ASSIGNING));
  await b.join();
  await a.heartbeat({ ackedRevocations: [] }); // computes the target; a must revoke 2 and 3
  const answer = await b.heartbeat();
  expect(answer.pendingShards).toEqual([2, 3]);
  expect(a.revoking).toEqual([2, 3]);
  return { group, a, b };
}

describe('fencing (SPEC section 3)', () => {
  it('a stale epoch is fenced and changes nothing', async () => {
    const group = await aGroup(redis, 6);
    const [a, b, c] = [group.member('a'), group.member('b'), group.member('c')];
    await a.join(); // epoch 1
    await b.join();
    await settle([a, b]); // epoch 2, previous 1
    await c.join();
    await settle([a, b, c]); // epoch 3, previous 2
    expect(a.memberEpoch).toBe(3);
    await expectRefused(group, { memberId: 'a', memberEpoch: 1, owned: [] }, ErrorCode.FENCED_MEMBER_EPOCH, /memberEpoch 1 is stale/);
  });

  it('an epoch ahead of the member epoch is fenced', async () => {
    const group = await aGroup(redis, 2);
    const a = group.member('a');
    await a.join();
    await expectRefused(group, { memberId: 'a', memberEpoch: a.memberEpoch + 1, owned: a.owned }, ErrorCode.FENCED_MEMBER_EPOCH, /ahead/);
  });

  it('the previous epoch is accepted when the report is within the assignment (a lost answer)', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a');
    await a.join();
    const b = group.member('b');
    await b.join();
    await settle([a, b]);
    const previous = 1;
    expect(a.memberEpoch).toBe(2);
    const answer = await a.send({ memberEpoch: previous, owned: a.owned });
    expect(answer.errorCode).toBe(ErrorCode.NONE);
    expect(answer.memberEpoch).toBe(2);
    expect(answer.assignedShards).toEqual(a.owned);
  });

  it('reporting a pending shard as owned is fenced', async () => {
    const { group, b } = await aHandoffInProgress();
    await expectRefused(
      group,
      { memberId: 'b', memberEpoch: b.memberEpoch, owned: [2] },
      ErrorCode.FENCED_MEMBER_EPOCH,
      /shard 2 is still pending/,
    );
  });

  it("reporting another member's shard as owned is fenced", async () => {
    const { group, b } = await aHandoffInProgress();
    await expectRefused(
      group,
      { memberId: 'b', memberEpoch: b.memberEpoch, owned: [0] },
      ErrorCode.FENCED_MEMBER_EPOCH,
      /shard 0 is owned by member a/,
    );
  });

  it('a positive epoch from an unknown member is UNKNOWN_MEMBER_ID', async () => {
    const group = await aGroup(redis, 2);
    await group.member('a').join();
    await expectRefused(group, { memberId: 'stranger', memberEpoch: 3 }, ErrorCode.UNKNOWN_MEMBER_ID, /stranger is not an active member/);
  });

  it('a fenced member rejoins with epoch 0 and gets a strictly higher epoch and a fresh assignment', async () => {
    const { group, a, b } = await aHandoffInProgress();
    const fenced = await b.heartbeat({ owned: [0] });
    expect(fenced.errorCode).toBe(ErrorCode.FENCED_MEMBER_EPOCH);
    const epochBefore = (await group.describe()).members.find((m) => m.memberId === 'b')!.memberEpoch;

    const rejoined = await b.join();
    expect(rejoined.errorCode).toBe(ErrorCode.NONE);
    await settle([a, b]);
    const after = (await group.describe()).members.find((m) => m.memberId === 'b')!;
    expect(after.memberEpoch).toBeGreaterThan(epochBefore);
    expect(after.currentAssignment.map((s) => s.shardIndex)).toEqual([2, 3]);
    expect(b.owned).toEqual([2, 3]);
  });

  it('an expired member is told UNKNOWN_MEMBER_ID, and its rejoin gets a higher epoch and shards again', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a', { sessionTimeoutMs: 100 });
    const b = group.member('b');
    await a.join();
    await b.join();
    await settle([a, b]);
    const epochBefore = a.memberEpoch;
    await pollUntil('a to expire by Redis time', async () => {
      await b.heartbeat();
      return (await group.describe()).members.find((m) => m.memberId === 'a')?.state === 'EXPIRED';
    });
    await expectRefused(
      group,
      { ...a.request(), memberId: 'a' },
      ErrorCode.UNKNOWN_MEMBER_ID,
      /not an active member of the group \(EXPIRED\)/,
    );
    await a.join();
    await settle([a, b]);
    expect(a.memberEpoch).toBeGreaterThan(epochBefore);
    expect(a.owned).toHaveLength(2);
  });

  it('a member whose own lease ran out is refused before anyone noticed the expiry', async () => {
    const group = await aGroup(redis, 2);
    const a = group.member('a', { sessionTimeoutMs: 50 });
    await a.join();
    const [{ memberLeaseExpiresAt }] = (await group.describe()).members;
    await pollUntil('the lease end to pass', async () => Date.now() > Date.parse(memberLeaseExpiresAt) + 5);
    await expectRefused(group, { ...a.request(), memberId: 'a' }, ErrorCode.UNKNOWN_MEMBER_ID, /lease expired/);
  });
});

describe('bad input gets INVALID_REQUEST naming the field and changes nothing', () => {
  const cases: [string, Partial<HeartbeatRequest>, RegExp][] = [
    ['memberId with a space', { memberId: 'a b' }, /memberId/],
    ['memberId with a brace', { memberId: '{a}' }, /memberId/],
    ['empty memberId', { memberId: '' }, /memberId/],
    ['memberId of 129 characters', { memberId: 'x'.repeat(129) }, /memberId/],
    ['empty memberName', { memberName: '' }, /memberName/],
    ['memberName with a newline', { memberName: 'a\nb' }, /memberName/],
    ['fractional memberEpoch', { memberEpoch: 1.5 }, /memberEpoch must be an integer/],
    ['memberEpoch below -1', { memberEpoch: -2 }, /memberEpoch must be from -1/],
    ['memberEpoch that is not a number', { memberEpoch: Number.NaN }, /memberEpoch must be an integer/],
    ['negative shard index', { owned: [-1] }, /owned must be a comma-separated list/],
    ['shard index outside the readable set', { owned: [4] }, /owned: shard index 4 is outside the readable shard set/],
    ['duplicate shard index', { revoking: [1, 1] }, /revoking: shard index 1 is listed twice/],
    ['fractional shard index', { ackedRevocations: [1.5] }, /ackedRevocations must be a comma-separated list/],
    ['oversized report', { owned: Array.from({ length: 50 }, (_, i) => i) }, /owned must be a comma-separated list of at most 4/],
    ['weight 0', { weight: 0 }, /weight must be from 1/],
    ['fractional sessionTimeoutMs', { sessionTimeoutMs: 1000.5 }, /sessionTimeoutMs must be an integer/],
    ['zero runtimeMaxConcurrency', { runtimeMaxConcurrency: 0 }, /runtimeMaxConcurrency must be from 1/],
    ['negative metadataVersion', { metadataVersion: -1 }, /metadataVersion must be from 0/],
  ];

  it.each(cases)('%s', async (_name, request, message) => {
    const group = await aGroup(redis, 4);
    const a = group.member('a');
    await a.join();
    await expectRefused(group, { ...a.request(), memberId: 'a', ...request }, ErrorCode.INVALID_REQUEST, message);
  });

  it('names that would become keys are refused before reaching Redis', async () => {
    const group = await aGroup(redis, 4);
    for (const streamPrefix of ['', 'has space', 'a{b}', 'a:b']) {
      await expect(group.coordinator.heartbeat({ streamPrefix, consumerGroup: 'g', memberId: 'a', memberEpoch: 0 })).rejects.toThrow(
        InvalidRequestError,
      );
    }
    await expect(
      group.coordinator.heartbeat({ streamPrefix: 'ok', consumerGroup: 'bad group', memberId: 'a', memberEpoch: 0 }),
    ).rejects.toThrow(/consumerGroup "bad group" is invalid/);
  });

  it('a heartbeat for a stream without metadata is GROUP_NOT_FOUND', async () => {
    const group = await aGroup(redis, 4);
    const response = await group.coordinator.heartbeat({
      streamPrefix: 'never-created',
      consumerGroup: 'g',
      memberId: 'a',
      memberEpoch: 0,
    });
    expect(response.errorCode).toBe(ErrorCode.GROUP_NOT_FOUND);
    expect(response.errorMessage).toMatch(/createStream/);
  });
});
