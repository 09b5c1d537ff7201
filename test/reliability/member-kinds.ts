/**
 * The kinds of member process the soak runs side by side (docs/reliability.md, Member kinds): each
 * new process takes the next kind in turn, so a share of the members is each of them, and the
 * checker reports its promises per kind.
 */
import type { MemberProcessSettings } from '../../packages/core/src/testing/member-process';

/**
 * `plain`: a member with the run's lanes (1 in the short tier, 4 in the soak); `static`: static
 * membership (`memberInstanceId`), restarted inside its session by the static-restart fault;
 * `batch`: a batch handler (one lane: batches take none); `manual-acks`: `ackMode: 'manual'`,
 * acked or nacked just after the handler returned; `lanes`: more key-ordered lanes than the others; `deferred`: `retryMode: 'deferred'` (deferredOrder
 * 'key'), the kind of the deferring group's processes only (harness.ts, DEFERRED_GROUP): members of
 * one group must agree on retryMode (docs/runtime.md, Deferred retries), so it is not in the turn.
 */
export type MemberKind = 'plain' | 'static' | 'batch' | 'manual-acks' | 'lanes' | 'deferred';

/** In the order new processes of the first group take them: the first three (a run's first members) differ. */
export const MEMBER_KINDS: readonly MemberKind[] = ['plain', 'static', 'batch', 'manual-acks', 'lanes'];

/** Entries per batch call of a batch member: several per call at 200 entries/s over 8 shards. */
const BATCH_MAX_SIZE = 16;

/**
 * The member options of a kind, given the run's lanes (`HarnessOptions.lanes`): a `lanes` member
 * runs twice as many (at least 4), a batch member one.
 */
export function kindSettings(
  kind: MemberKind,
  runLanes: number,
): Pick<MemberProcessSettings, 'lanes' | 'staticMember' | 'batchMaxSize' | 'manualAcks' | 'deferred'> {
  switch (kind) {
    case 'plain':
      return { lanes: runLanes };
    case 'static':
      return { lanes: runLanes, staticMember: true };
    case 'batch':
      return { lanes: 1, batchMaxSize: BATCH_MAX_SIZE };
    case 'manual-acks':
      return { lanes: runLanes, manualAcks: true };
    case 'lanes':
      return { lanes: Math.max(4, 2 * runLanes) };
    case 'deferred':
      return { lanes: runLanes, deferred: 'key' };
  }
}
