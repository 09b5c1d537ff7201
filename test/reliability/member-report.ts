/**
 * Who did what, for a fault the groups did not recover from (harness.ts `inject`): one line per
 * member process, enough to tell a wedged member from a slow one next time without rerunning. Each
 * says whether the process still runs, what Redis holds for it (state, epoch, unproven, shards),
 * what the member itself says (its SIGWINCH 'state' line: lifecycle, epoch, joined, problems), and
 * what it recorded since the fault began: events, errors by kind (numbers folded), the last few.
 * A member whose epoch is -1 while it runs, or that Redis holds as LEFT or not at all, is the
 * pattern of a member that stopped rejoining (a refused target commit once taken for an answer).
 */
import type { GroupDescription } from '@redis-stream-coordinator/core';
import type { ChaosHarness } from './harness';
import { type MemberProcess, readRecordsSince, sleep } from './harness-tools';
import type { RecordLine } from './records';

/** How long the member processes get to write their 'state' line after SIGWINCH. */
const STATE_WAIT_MS = 500;
/** Distinct error texts listed per member (the most frequent first). */
const ERROR_KINDS = 4;
/** Latest records (other than handler runs and acks) listed per member. */
const LAST_RECORDS = 5;
/** Characters kept of one error text or record. */
const TEXT_CHARS = 160;

const HANDLER_RECORDS = new Set(['start', 'end', 'ack', 'dead-letter', 'state', 'problems']);

/** One line per member process (removed ones are not listed: they are not expected in a group). */
export async function whoDidWhat(h: ChaosHarness, since: number): Promise<string[]> {
  const members = [...h.members.values()];
  for (const member of members) if (member.child.exitCode === null) member.child.kill('SIGWINCH');
  await sleep(STATE_WAIT_MS);
  const groups = new Map<string, GroupDescription | string>();
  for (const group of h.groups) {
    groups.set(group, await h.admin.describeGroup(h.streamPrefix, group).catch((error: Error) => `describeGroup failed: ${error.message}`));
  }
  const lines: string[] = [];
  for (const member of members)
    lines.push(memberLine(member, groups.get(member.group), since, await readRecordsSince(member.recordFile, since)));
  return lines;
}

function memberLine(member: MemberProcess, group: GroupDescription | string | undefined, since: number, recent: RecordLine[]): string {
  const at = (l: RecordLine) => `${l.t - since >= 0 ? '+' : ''}${Math.round(l.t - since)} ms`;
  const events = count(recent.filter((l) => ['assigned', 'revoked', 'fenced', 'lease-lost'].includes(l.e)).map((l) => l.e));
  const errors = count(recent.filter((l) => l.e === 'error').map((l) => folded(l.msg ?? '')));
  const topErrors = [...errors.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, ERROR_KINDS)
    .map(([text, n]) => `${n}× "${text}"`);
  const last = recent
    .filter((l) => !HANDLER_RECORDS.has(l.e))
    .slice(-LAST_RECORDS)
    .map(
      (l) =>
        `${at(l)} ${l.e}${l.shards ? ` [${l.shards.join(',')}]` : ''}${l.ep !== undefined ? ` ep ${l.ep}` : ''}${l.msg ? ` ${l.msg.slice(0, TEXT_CHARS)}` : ''}`,
    );
  const runs = recent.filter((l) => l.e === 'start').length;
  const state = [...recent].reverse().find((l) => l.e === 'state') as
    | (RecordLine & { stats?: Record<string, unknown>; lifecycle?: string })
    | undefined;
  const says = state?.stats
    ? `it says: ${state.lifecycle}, epoch ${String(state.stats.memberEpoch)}, joined ${String(state.stats.joined)}, owns [${String(state.stats.ownedShards)}], problems ${JSON.stringify(state.stats.problems).slice(0, TEXT_CHARS)}`
    : 'it wrote no state line';
  return [
    `${member.handle} (${member.kind}, ${member.group}, ${processState(member)})`,
    `Redis: ${redisRecord(member, group)}`,
    says,
    `since the fault: ${runs} handler runs, events ${formatCounts(events)}, errors ${topErrors.join(', ') || 'none'}`,
    `last: ${last.join(' | ') || 'nothing'}`,
  ].join('; ');
}

function processState(member: MemberProcess): string {
  const { child } = member;
  if (child.exitCode !== null) return `exited ${child.exitCode}`;
  if (child.signalCode !== null) return `killed ${child.signalCode}`;
  return `pid ${child.pid} running${member.isolated ? ', cut off' : ''}`;
}

function redisRecord(member: MemberProcess, group: GroupDescription | string | undefined): string {
  if (group === undefined) return 'its group is not known to the harness';
  if (typeof group === 'string') return group;
  const record = group.members.find((m) => m.memberId === member.memberId);
  if (!record) return `no record in ${member.group} (${group.group.state}, groupEpoch ${group.group.groupEpoch})`;
  return `${record.state} epoch ${record.memberEpoch}${record.unprovenSince ? ` unproven since ${record.unprovenSince}` : ''}, owns [${record.currentAssignment.map((s) => s.shardIndex).join(',')}]${record.revoking.length > 0 ? `, revoking [${record.revoking.map((s) => s.shardIndex).join(',')}]` : ''}`;
}

/** An error text with its numbers folded, so that one kind of error counts once whatever its ids and times. */
function folded(text: string): string {
  return text.replace(/\d+/g, 'N').slice(0, TEXT_CHARS);
}

function count(values: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const value of values) counts.set(value, (counts.get(value) ?? 0) + 1);
  return counts;
}

function formatCounts(counts: Map<string, number>): string {
  return counts.size === 0 ? 'none' : [...counts.entries()].map(([e, n]) => `${e} ${n}`).join(', ');
}
