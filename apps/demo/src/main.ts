/**
 * The demo, at this stage of the project: the coordinator on its own. Three members join a group of
 * a stream with 8 shards, one at a time, then one leaves; after each step the demo prints the group
 * as `describeGroup` sees it. The NestJS pipeline (HTTP publisher, @StreamListener, bean consumer)
 * replaces this once the member runtime and the starter land.
 *
 *   npm run demo                      # private redis-server, started and stopped by the demo
 *   REDIS_URL=redis://host:6379 npm run demo
 */
import { Redis } from 'ioredis';
import { CoordinatorAdmin, CoordinatorClient, ErrorCode, type HeartbeatResponse } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';

const STREAM = 'summary';
const GROUP = 'summary-group';

interface DemoMember {
  memberId: string;
  memberEpoch: number;
  owned: number[];
  revoking: number[];
}

async function main(): Promise<void> {
  const privateServer = process.env.REDIS_URL ? undefined : await RedisServer.start();
  const url = process.env.REDIS_URL ?? privateServer!.url;
  console.log(privateServer ? `started a private redis-server at ${url}` : `using REDIS_URL ${url}`);
  const redis = new Redis(url);
  try {
    const admin = new CoordinatorAdmin(redis);
    const coordinator = new CoordinatorClient(redis);
    await admin.createStream({ streamPrefix: STREAM, shardCount: 8 });
    const members: DemoMember[] = [];

    const step = async (member: DemoMember, memberEpoch = member.memberEpoch): Promise<HeartbeatResponse> => {
      const response = await coordinator.heartbeat({
        streamPrefix: STREAM, consumerGroup: GROUP, memberId: member.memberId, memberEpoch,
        owned: member.owned, revoking: member.revoking, ackedRevocations: member.revoking,
      });
      if (response.errorCode !== ErrorCode.NONE) throw new Error(`${response.errorCode}: ${response.errorMessage}`);
      Object.assign(member, { memberEpoch: response.memberEpoch, owned: response.assignedShards, revoking: response.revokeShards });
      return response;
    };
    const settle = async () => {
      for (let round = 0; round < 10; round++) {
        let stable = true;
        for (const member of members) stable = (await step(member)).state === 'STABLE' && member.revoking.length === 0 && stable;
        if (stable) return;
      }
    };
    const show = async (title: string) => {
      const { group, members: described } = await admin.describeGroup(STREAM, GROUP);
      console.log(`\n${title}: groupEpoch ${group.groupEpoch}, assignmentEpoch ${group.assignmentEpoch}, ${group.state}`);
      for (const m of described) {
        const shards = m.currentAssignment.map((s) => s.shardIndex).join(', ');
        console.log(`  ${m.memberId.padEnd(10)} ${m.state.padEnd(7)} epoch ${String(m.memberEpoch).padEnd(3)} shards [${shards}]`);
      }
    };

    for (const memberId of [`member-a-${process.pid}`, `member-b-${process.pid}`, `member-c-${process.pid}`]) {
      const member: DemoMember = { memberId, memberEpoch: 0, owned: [], revoking: [] };
      members.push(member);
      await step(member, 0);
      await settle();
      await show(`${memberId} joined`);
    }
    const leaving = members.shift()!;
    await step(leaving, -1);
    await settle();
    await show(`${leaving.memberId} left`);
    for (const member of members) await step(member, -1);
  } finally {
    redis.disconnect();
    await privateServer?.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
