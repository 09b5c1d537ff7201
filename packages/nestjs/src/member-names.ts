import os from 'node:os';
import { MAX_MEMBER_NAME_LENGTH } from '@redis-stream-coordinator/core';

/** The longest host part of a default member name: a host's first label (DNS labels are at most 63 characters). */
const MAX_HOST_LENGTH = 63;

/**
 * Where a member runs, for the end of its default name: `<host>:<pid>`, so that `rsc describe`, the
 * dashboard and health tell apart the processes of one application (two instances of it used to
 * show the same `SummaryHandlers.onSummary-m1` twice). A static member (`memberInstanceId`) is named
 * after its instance id instead: the name stays the same across restarts, as its shards do.
 */
function placeOf(memberInstanceId: string | undefined): string {
  if (memberInstanceId !== undefined) return memberInstanceId;
  // Hostnames are printable ASCII; the first label is what people call the machine (or the pod).
  const host = os.hostname().split('.')[0].slice(0, MAX_HOST_LENGTH) || 'localhost';
  return `${host}:${process.pid}`;
}

/**
 * A member's name when the application gives none: `<label>@<host>:<pid>`, or `<label>@<memberInstanceId>`
 * for a static member. `label` is `Class.method-mI` for a listener's member, the consumer's id for a
 * bean. The label is shortened when needed, so that the name stays within MAX_MEMBER_NAME_LENGTH.
 */
export function defaultMemberName(label: string, memberInstanceId?: string): string {
  const place = `@${placeOf(memberInstanceId)}`;
  return `${label.slice(0, Math.max(1, MAX_MEMBER_NAME_LENGTH - place.length))}${place}`;
}
