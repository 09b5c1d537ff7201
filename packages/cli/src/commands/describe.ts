import { Command } from 'commander';
import { type CoordinatorAdmin, SHARD_SCHEDULE_COUNTS } from '@redis-stream-coordinator/core';
import { pause, withAdmin } from '../context';
import type { RscIo } from '../io';
import { duration, scheduleCell, shardList, table } from '../output';

/** Everything `describe` shows: the group, one row per shard, one per member. */
async function snapshot(admin: CoordinatorAdmin, prefix: string, group: string) {
  const [description, positions, now] = await Promise.all([
    admin.describeGroup(prefix, group),
    admin.shardPositions(prefix, group),
    admin.serverTimeMs(),
  ]);
  const byId = new Map(description.members.map((m) => [m.memberId, m]));
  const shards = description.shards.map((shard) => {
    const position = positions.find((p) => p.shardIndex === shard.shardIndex);
    const owner = shard.owner === null ? undefined : byId.get(shard.owner);
    return {
      ...shard,
      ownerName: owner?.memberName ?? shard.owner,
      ownerEpoch: owner?.memberEpoch ?? null,
      lastDeliveredId: position?.lastDeliveredId ?? null,
      oldestPendingId: position?.oldestPendingId ?? null,
      oldestPendingAgeMs: position?.oldestPendingAgeMs ?? null,
    };
  });
  const members = description.members.map((m) => ({
    ...m,
    leaseLeftMs: Date.parse(m.memberLeaseExpiresAt) - now,
    sinceHeartbeatMs: now - Date.parse(m.lastHeartbeatAt),
    // A departed static member: how long its shards still wait for its next instance.
    awaitedLeftMs: m.awaitedUntil === null ? null : Date.parse(m.awaitedUntil) - now,
  }));
  return { group: description.group, shards, members, at: new Date(now).toISOString() };
}

/** A schedule's next due time, for the counts that keep one (a count without due times shows alone). */
const dueOf = (times: object, kind: string): number | null | undefined => (times as Record<string, number | null | undefined>)[kind];

function render(view: Awaited<ReturnType<typeof snapshot>>): string {
  const { group } = view;
  const head =
    `group ${group.consumerGroup} of stream ${group.streamPrefix}: ${group.state}  groupEpoch ${group.groupEpoch}  ` +
    `assignmentEpoch ${group.assignmentEpoch}  metadataVersion ${group.metadataVersion}  shards ${group.shardCount}  ` +
    `readable ${shardList(group.readableShardSet) || '-'}${group.cutoverInProgress ? `  CUTOVER IN PROGRESS (not yet readable backlog ${group.notYetReadableBacklog})` : ''}` +
    // Every count of SHARD_SCHEDULE_COUNTS, its group total then a column per shard: a count added there shows here.
    SHARD_SCHEDULE_COUNTS.map((kind) => `  ${kind} ${scheduleCell(group[kind], dueOf(group.nextDueAt, kind), group.describedAt)}`).join('');
  const shards = table(
    [
      'SHARD',
      'READABILITY',
      'STATE',
      'OWNER',
      'OWNER EPOCH',
      'LAG',
      'PENDING',
      ...SHARD_SCHEDULE_COUNTS.map((kind) => kind.toUpperCase()),
      'OLDEST PENDING',
      'LAST DELIVERED',
    ],
    view.shards.map((s) => [
      s.shardIndex,
      s.readability,
      s.state,
      s.ownerName,
      s.ownerEpoch,
      s.lag,
      s.pending,
      ...SHARD_SCHEDULE_COUNTS.map((kind) => scheduleCell(s[kind], dueOf(s.nextDueAt, kind), group.describedAt)),
      duration(s.oldestPendingAgeMs),
      s.lastDeliveredId,
    ]),
  );
  const members =
    view.members.length === 0
      ? 'no members'
      : table(
          ['MEMBER', 'NAME', 'STATE', 'EPOCH', 'LEASE LEFT', 'LAST HEARTBEAT', 'OWNED', 'REVOKING', 'WEIGHT', 'INSTANCE'],
          view.members.map((m) => [
            m.memberId,
            m.memberName,
            m.awaitedUntil === null ? m.state : 'AWAY',
            m.memberEpoch,
            m.state === 'ACTIVE' ? duration(m.leaseLeftMs) : '-',
            `${duration(m.sinceHeartbeatMs)} ago`,
            shardList(m.currentAssignment.map((r) => r.shardIndex)),
            shardList(m.revoking.map((r) => r.shardIndex)),
            m.weight,
            m.memberInstanceId,
          ]),
        );
  const away = view.members.filter((m) => m.awaitedUntil !== null);
  const awaited =
    away.length === 0
      ? ''
      : '\n\nawaited static members (departed; their shards wait, unread, for their next instance until the wait ends):\n' +
        table(
          ['INSTANCE', 'DEPARTED', 'WAIT ENDS', 'WAIT LEFT', 'SHARDS'],
          away.map((m) => [
            m.memberInstanceId,
            m.departedAt,
            m.awaitedUntil,
            duration(m.awaitedLeftMs),
            shardList(m.currentAssignment.map((r) => r.shardIndex)),
          ]),
        );
  return `${head}\n\n${shards}\n\n${members}${awaited}`;
}

/** `rsc describe <prefix> <group> [--watch] [--json]`. */
export function registerDescribe(program: Command, io: RscIo): void {
  program
    .command('describe')
    .description(
      'one row per shard (owner, epoch, lag, pending, scheduled, deferred and when they are next due, oldest pending, last delivered) and one per member',
    )
    .argument('<prefix>', 'stream prefix')
    .argument('<group>', 'consumer group')
    .option('-w, --watch', 'redraw every second until Ctrl-C (with --json: one JSON document per line)')
    .action((prefix: string, group: string, options: { watch?: boolean }, command: Command) =>
      withAdmin(command, io, async (context) => {
        const { admin, json, out } = context;
        if (!options.watch) {
          const view = await snapshot(admin, prefix, group);
          return json ? out.json(view) : out.print(render(view));
        }
        while (!context.isStopped()) {
          const view = await snapshot(admin, prefix, group);
          if (json) out.jsonLine(view);
          // Clear the screen and go home, then draw: a steady picture rather than a scroll.
          else out.raw(`\x1b[2J\x1b[H${render(view)}\n\n(every 1s, Ctrl-C to stop)  ${view.at}\n`);
          await pause(context, 1000);
        }
      }),
    );
}
