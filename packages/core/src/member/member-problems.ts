/**
 * Conditions of a member (not of one of its shards) that keep it from working, by kind, one line
 * each; `stats().problems` lists them (in the order they arose) before the poller's shard problems.
 * - group: the stream has no metadata (GROUP_NOT_FOUND)
 * - request: the coordinator refuses the member's heartbeats (INVALID_REQUEST)
 * - metadata: the group's cutover after a resize cannot be read
 * - instance: another instance holds this memberId (FENCED_INSTANCE_ID), for good
 * - connection: the command connection is on a replica (heartbeats refused READONLY), or heartbeats
 *   got no answer in time twice in a row
 */
export type MemberProblems = Map<'group' | 'request' | 'metadata' | 'instance' | 'connection', string>;
