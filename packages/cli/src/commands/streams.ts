import { StreamNotFoundError } from '@redis-stream-coordinator/core';
import type { Command } from 'commander';
import { withAdmin } from '../context';
import type { RscIo } from '../io';
import { table } from '../output';

/** `rsc streams` and `rsc groups <prefix>`: what exists. */
export function registerInventory(program: Command, io: RscIo): void {
  program
    .command('streams')
    .description('list the stream prefixes with their shard counts, metadata versions and groups')
    .action((_options, command: Command) =>
      withAdmin(command, io, async ({ admin, json, out }) => {
        const streams = [];
        for (const prefix of await admin.listStreams()) {
          const meta = await admin.describeStream(prefix);
          if (meta) streams.push({ ...meta, groups: await admin.listGroups(prefix) });
        }
        if (json) return out.json(streams);
        if (streams.length === 0) return out.print('no streams');
        out.print(
          table(
            ['STREAM', 'SHARDS', 'SPAN', 'METADATA VERSION', 'GROUPS', 'UPDATED'],
            streams.map((s) => [s.streamPrefix, s.shardCount, s.shardSpan, s.metadataVersion, s.groups.join(',') || '-', s.updatedAt]),
          ),
        );
      }),
    );

  program
    .command('groups')
    .description("list a stream's consumer groups with their state, epochs, members and backlog")
    .argument('<prefix>', 'stream prefix')
    .action((prefix: string, _options, command: Command) =>
      withAdmin(command, io, async ({ admin, json, out }) => {
        const meta = await admin.describeStream(prefix);
        if (!meta) throw new StreamNotFoundError(prefix, 'no groups to list');
        const groups = [];
        for (const name of await admin.listGroups(prefix)) {
          try {
            const { group, members, shards } = await admin.describeGroup(prefix, name);
            groups.push({
              consumerGroup: name,
              state: group.state,
              groupEpoch: group.groupEpoch,
              assignmentEpoch: group.assignmentEpoch,
              members: members.filter((m) => m.state === 'ACTIVE').length,
              backlog: shards.reduce((sum, s) => sum + s.backlog, 0),
              cutoverInProgress: group.cutoverInProgress,
            });
          } catch (error) {
            groups.push({ consumerGroup: name, error: (error as Error).message });
          }
        }
        if (json) return out.json({ streamPrefix: prefix, shardCount: meta.shardCount, metadataVersion: meta.metadataVersion, groups });
        out.print(`stream ${prefix}: ${meta.shardCount} shards, metadataVersion ${meta.metadataVersion}`);
        if (groups.length === 0) return out.print('no consumer groups');
        out.print(
          table(
            ['GROUP', 'STATE', 'GROUP EPOCH', 'ASSIGNMENT EPOCH', 'ACTIVE MEMBERS', 'BACKLOG', 'CUTOVER'],
            groups.map((g) =>
              'error' in g
                ? [g.consumerGroup, `error: ${g.error}`]
                : [g.consumerGroup, g.state, g.groupEpoch, g.assignmentEpoch, g.members, g.backlog, g.cutoverInProgress ? 'yes' : 'no'],
            ),
          ),
        );
      }),
    );
}
