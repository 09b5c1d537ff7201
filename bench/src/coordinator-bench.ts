import type { Redis } from 'ioredis';
import { type AssignmentInput, CoordinatorAdmin, CoordinatorClient, OPTION_RANGES, StickyAssignor } from '@redis-stream-coordinator/core';
import { ProtocolMember, settle } from '@redis-stream-coordinator/core/testing';
import { resetCommandStats, scriptStat } from './redis-stats';
import { elapsedMs, median, percentile, type Spread, spread } from './stats';

export interface CoordinatorFigures {
  members: number;
  shards: number;
  steadyHeartbeat: { redisUsPerCall: number; redisUsSpread: Spread; rttP50Ms: number; rttP99Ms: number; calls: number };
  join: { redisUsPerCall: number; rttP50Ms: number; rttP99Ms: number; calls: number };
  commit: { redisUsPerCall: number; redisUsSpread: Spread; rttMs: number; samples: number };
  assignorMs: { fresh: number; scaleOut: number; samples: number };
}

const SHARDS_PER_MEMBER = 10;
/** Never computes a target: joins are measured on their own, without the commit that follows. */
const HOLD = { assignmentDelayMs: 86_400_000 };

async function timed<T>(samples: number[], call: () => Promise<T>): Promise<T> {
  const start = process.hrtime.bigint();
  const result = await call();
  samples.push(elapsedMs(start));
  return result;
}

function memberIds(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `bench-member-${String(i).padStart(5, '0')}`);
}

/** The assignor's own time, with no Redis: a fresh group, and one new member joining a balanced one. */
export function measureAssignor(members: number, shards: number, repetitions: number): CoordinatorFigures['assignorMs'] {
  const assignor = new StickyAssignor();
  const ids = memberIds(members);
  const base: AssignmentInput = {
    groupEpoch: 1,
    members: ids.map((memberId) => ({ memberId, weight: 1 })),
    readableShardSet: Array.from({ length: shards }, (_, i) => i),
    previousTarget: {},
  };
  const fresh: number[] = [];
  const scaleOut: number[] = [];
  for (let i = 0; i < repetitions; i++) {
    let start = process.hrtime.bigint();
    const balanced = assignor.assign(base);
    fresh.push(elapsedMs(start));
    start = process.hrtime.bigint();
    assignor.assign({ ...base, members: [...base.members, { memberId: 'newcomer', weight: 1 }], previousTarget: balanced });
    scaleOut.push(elapsedMs(start));
  }
  return { fresh: median(fresh), scaleOut: median(scaleOut), samples: repetitions };
}

/**
 * A group of `members` members with 10 shards each (at most the `shardCount` range's maximum, 8,192) on one Redis: the Redis-side cost (INFO
 * commandstats, usec per EVALSHA) and client round trips of joins, target commits and steady-state
 * heartbeats.
 */
export async function measureCoordinator(
  redis: Redis,
  members: number,
  options: { steadyCalls: number; commitSamples: number; progress: (line: string) => void },
): Promise<CoordinatorFigures> {
  const shards = Math.min(members * SHARDS_PER_MEMBER, OPTION_RANGES.shardCount.max);
  const streamPrefix = `bench-${members}`;
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: shards });
  const coordinator = new CoordinatorClient(redis);
  const holding = new CoordinatorClient(redis, HOLD);
  const group = 'bench-group';

  // Joins, without the target computation they trigger.
  const joiners = memberIds(members).map((id) => new ProtocolMember(holding, streamPrefix, group, id));
  const joinRtt: number[] = [];
  await resetCommandStats(redis);
  for (const member of joiners) await timed(joinRtt, () => member.join());
  const joinStat = await scriptStat(redis);
  options.progress(`  ${members} members joined`);

  // Target commits: each sample changes the input (an extra member joins or leaves), then one
  // member computes the target and commits it.
  const extra = new ProtocolMember(holding, streamPrefix, group, 'bench-extra');
  const committer = joiners[0];
  const commitRtt: number[] = [];
  const commitUs: number[] = [];
  for (let i = 0; i < options.commitSamples; i++) {
    if (i > 0) await (i % 2 === 1 ? extra.join() : extra.leave());
    const asked = committer.apply(await coordinator.heartbeatOnce(committer.request()));
    if (!asked.computeAssignment)
      throw new Error(`the bench member was not asked to compute the target: ${asked.errorCode} ${asked.errorMessage}`);
    const input = asked.assignmentInput!;
    const plan = coordinator.options.assignor.assign(input);
    await resetCommandStats(redis);
    const commit = await timed(commitRtt, () =>
      coordinator.commitAssignment(committer.request({ memberEpoch: asked.memberEpoch }), input.groupEpoch, plan),
    );
    if (commit.commitResult !== 'NONE') throw new Error(`commit refused: ${commit.commitMessage}`);
    committer.apply(commit.response);
    commitUs.push((await scriptStat(redis)).usec);
  }
  if (options.commitSamples % 2 === 0) await extra.leave(); // an even count leaves the extra member in
  // The same members, now through a client that computes targets, converge.
  const settled = joiners.map((joiner) => {
    const member = new ProtocolMember(coordinator, streamPrefix, group, joiner.memberId);
    Object.assign(member, { memberEpoch: joiner.memberEpoch, owned: joiner.owned, revoking: joiner.revoking });
    return member;
  });
  await settle(settled, 50);
  options.progress(`  target committed ${options.commitSamples} times; group STABLE`);

  // Steady state: every member heartbeats in turn; nothing changes. Three repetitions, because a
  // 2-core machine shared with the client is noisy; the table shows the median and the spread.
  const steadyRtt: number[] = [];
  const steadyUs: number[] = [];
  let steadyCalls = 0;
  for (let repetition = 0; repetition < 3; repetition++) {
    await resetCommandStats(redis);
    for (let call = 0; call < options.steadyCalls; call++) {
      const member = settled[call % settled.length];
      await timed(steadyRtt, () => member.heartbeat());
    }
    const stat = await scriptStat(redis);
    steadyUs.push(stat.usecPerCall);
    steadyCalls += stat.calls;
  }
  const last = settled[0].last!;
  if (last.state !== 'STABLE') throw new Error(`steady-state phase ended ${last.state}`);
  options.progress(`  ${options.steadyCalls} steady-state heartbeats`);

  return {
    members,
    shards,
    steadyHeartbeat: {
      redisUsPerCall: median(steadyUs),
      redisUsSpread: spread(steadyUs),
      rttP50Ms: percentile(steadyRtt, 50),
      rttP99Ms: percentile(steadyRtt, 99),
      calls: steadyCalls,
    },
    join: {
      redisUsPerCall: joinStat.usecPerCall,
      rttP50Ms: percentile(joinRtt, 50),
      rttP99Ms: percentile(joinRtt, 99),
      calls: joinStat.calls,
    },
    commit: { redisUsPerCall: median(commitUs), redisUsSpread: spread(commitUs), rttMs: median(commitRtt), samples: commitUs.length },
    assignorMs: measureAssignor(members, shards, 10),
  };
}
