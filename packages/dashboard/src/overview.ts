import type { CoordinatorAdmin, GroupState } from '@redis-stream-coordinator/core';
import type { GroupView } from './group-watch';

export interface GroupSummary {
  consumerGroup: string;
  state: GroupState | null;
  groupEpoch: number | null;
  assignmentEpoch: number | null;
  activeMembers: number;
  backlog: number | null;
  cutoverInProgress: boolean;
  /** Why the group could not be read (e.g. no member ever joined it). */
  error?: string;
}

export interface StreamSummary {
  streamPrefix: string;
  shardCount: number;
  shardSpan: number;
  metadataVersion: number;
  updatedAt: string;
  groups: GroupSummary[];
}

export interface Overview {
  at: string;
  streams: StreamSummary[];
}

/**
 * Every stream and group with their state, epochs, shard count and backlog. A group some browser
 * watches is taken from its watch (no read); the others are read with describeGroup.
 */
export async function readOverview(
  admin: CoordinatorAdmin,
  watched: (streamPrefix: string, consumerGroup: string) => GroupView | undefined,
): Promise<Overview> {
  const prefixes = await admin.listStreams();
  const streams = await Promise.all(
    prefixes.map(async (streamPrefix): Promise<StreamSummary | null> => {
      const [stream, groups] = await Promise.all([admin.describeStream(streamPrefix), admin.listGroups(streamPrefix)]);
      if (!stream) return null; // deleted between the scan and the read
      return {
        streamPrefix,
        shardCount: stream.shardCount,
        shardSpan: stream.shardSpan,
        metadataVersion: stream.metadataVersion,
        updatedAt: stream.updatedAt,
        groups: await Promise.all(groups.map((group) => summarize(admin, streamPrefix, group, watched(streamPrefix, group)))),
      };
    }),
  );
  return { at: new Date().toISOString(), streams: streams.filter((s): s is StreamSummary => s !== null) };
}

async function summarize(
  admin: CoordinatorAdmin,
  streamPrefix: string,
  consumerGroup: string,
  view: GroupView | undefined,
): Promise<GroupSummary> {
  try {
    const { group, members, shards } = view ?? (await admin.describeGroup(streamPrefix, consumerGroup));
    return {
      consumerGroup,
      state: group.state,
      groupEpoch: group.groupEpoch,
      assignmentEpoch: group.assignmentEpoch,
      activeMembers: members.filter((member) => member.state === 'ACTIVE').length,
      backlog: shards.reduce((sum, shard) => sum + shard.backlog, 0),
      cutoverInProgress: group.cutoverInProgress,
    };
  } catch (error) {
    return {
      consumerGroup,
      state: null,
      groupEpoch: null,
      assignmentEpoch: null,
      activeMembers: 0,
      backlog: null,
      cutoverInProgress: false,
      error: (error as Error).message,
    };
  }
}
