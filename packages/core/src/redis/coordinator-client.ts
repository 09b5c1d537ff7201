import { findPlanViolation } from '../assignor/validate-plan';
import { ErrorCode, errorCodeFromWire } from '../protocol/error-codes';
import { InvalidAssignmentError, toCoordinatorError } from '../protocol/errors';
import { type AssignmentPlan, type HeartbeatRequest, type HeartbeatResponse, JOIN_EPOCH } from '../protocol/heartbeat';
import {
  type CoordinatorOptions,
  configArgs,
  type HeartbeatObservation,
  type ResolvedCoordinatorOptions,
  resolveCoordinatorOptions,
} from './coordinator-options';
import { ensureGroupOnShardStreams } from './group-shard-streams';
import { KeyBuilder } from './keys';
import { type CommitResult, parseCommitReply, parseHeartbeatReply, toShardCsv } from './responses';
import { type RedisClient, runScript } from './scripts';

export const DEFAULT_SESSION_TIMEOUT_MS = 15_000;
export const DEFAULT_REBALANCE_TIMEOUT_MS = 30_000;

/** A new target can be made stale by another join while it is computed; try this often, then answer. */
const MAX_COMMIT_ATTEMPTS = 3;

/**
 * The coordinator protocol for one caller: each `heartbeat` is one atomic step in Redis (SPEC
 * section 3). When the answer asks this caller to compute the target, the client runs the assignor,
 * commits the target with a compare-and-set, and returns the member's reconciled answer, so that a
 * member sees one call per step.
 *
 * @example
 * const coordinator = new CoordinatorClient(redis);
 * const joined = await coordinator.heartbeat({
 *   streamPrefix: 'summary', consumerGroup: 'summary-group', memberId: 'a', memberEpoch: 0,
 * });
 * // joined.assignedShards -> the shards member 'a' may read now
 */
export class CoordinatorClient {
  readonly options: ResolvedCoordinatorOptions;
  readonly keys: KeyBuilder;
  private readonly config: number[];
  /** Groups whose Redis group this client already put on every shard stream before a join (heartbeatOnce). */
  private readonly groupsOnShardStreams = new Set<string>();

  constructor(
    private readonly redis: RedisClient,
    options: CoordinatorOptions = {},
  ) {
    this.options = resolveCoordinatorOptions(options);
    this.keys = new KeyBuilder(this.options.keyPrefix);
    this.config = configArgs(this.options);
  }

  async heartbeat(request: HeartbeatRequest): Promise<HeartbeatResponse> {
    return this.completeAssignment(request, await this.heartbeatOnce(request));
  }

  /**
   * When `answer` (to `request`) asks this caller to compute the target: runs the assignor, commits
   * the target (compare-and-set, tried again when another join made it stale) and returns the
   * member's reconciled answer; otherwise returns `answer` as it is. `heartbeat` is
   * `heartbeatOnce` then this; a caller that bounds each call on its own (a member on a slow link,
   * whose heartbeat and commit each come back in time but not both within one bound) calls the two.
   */
  async completeAssignment(request: HeartbeatRequest, answer: HeartbeatResponse): Promise<HeartbeatResponse> {
    let response = answer;
    for (let attempt = 0; response.computeAssignment && attempt < MAX_COMMIT_ATTEMPTS; attempt++) {
      const input = response.assignmentInput!;
      const plan = this.options.assignor.assign(input);
      const violation = findPlanViolation(input, plan);
      if (violation) {
        throw new InvalidAssignmentError(`assignor "${this.options.assignor.name}" broke invariant 5: ${violation}`);
      }
      const commit = await this.commitAssignment({ ...request, memberEpoch: response.memberEpoch }, input.groupEpoch, plan);
      if (commit.commitResult === ErrorCode.INVALID_ASSIGNMENT) {
        throw toCoordinatorError(commit.commitResult, commit.commitMessage);
      }
      // The readable set travels once per metadata version; keep it when the commit answer omits it.
      commit.response.readableShardSet ??= response.readableShardSet;
      response = commit.response;
    }
    return response;
  }

  /**
   * One heartbeat script call and nothing more: when `computeAssignment` is true the caller must
   * compute the target itself and call `commitAssignment`. For callers with their own assignment flow.
   */
  async heartbeatOnce(request: HeartbeatRequest): Promise<HeartbeatResponse> {
    // A join may create the group: its Redis group goes on every shard stream first (SPEC 10.6).
    // Once per group and client: a join resent at once (a refusal, a lost answer) must not pay the
    // extra round trip again, which on a slow link pushed it past the member's call deadline. The
    // set holds the groups this process's own members named, not names from outside.
    const group = `${request.streamPrefix}\n${request.consumerGroup}`;
    if (request.memberEpoch === JOIN_EPOCH && !this.groupsOnShardStreams.has(group)) {
      await ensureGroupOnShardStreams(this.redis, this.keys, request.streamPrefix, request.consumerGroup);
      this.groupsOnShardStreams.add(group);
    }
    const observe = this.options.onHeartbeat;
    if (!observe) return this.runHeartbeat(request);
    const sentAt = performance.now();
    let response: HeartbeatResponse;
    try {
      response = await this.runHeartbeat(request);
    } catch (error) {
      notify(observe, { request, roundTripMs: performance.now() - sentAt, error });
      throw error;
    }
    notify(observe, { request, roundTripMs: performance.now() - sentAt, response });
    return response;
  }

  private async runHeartbeat(request: HeartbeatRequest): Promise<HeartbeatResponse> {
    const reply = await runScript(this.redis, 'heartbeat', this.keys.groupKeys(request.streamPrefix, request.consumerGroup), [
      ...this.config,
      this.keys.groupWakeChannel(request.streamPrefix, request.consumerGroup),
      request.consumerGroup,
      request.memberId,
      String(request.memberEpoch),
      request.memberName ?? request.memberId,
      String(request.runtimeMaxConcurrency ?? 1),
      String(request.activeConsumerWorkers ?? 0),
      String(request.weight ?? 1),
      String(request.sessionTimeoutMs ?? DEFAULT_SESSION_TIMEOUT_MS),
      String(request.rebalanceTimeoutMs ?? DEFAULT_REBALANCE_TIMEOUT_MS),
      String(request.metadataVersion ?? 0),
      toShardCsv(request.owned),
      toShardCsv(request.revoking),
      toShardCsv(request.ackedRevocations),
      request.instanceId ?? '',
      request.staticMember === true ? '1' : '',
      request.deadline === undefined ? '' : String(Math.floor(request.deadline)),
      request.answeredAt === undefined ? '' : String(Math.floor(request.answeredAt)),
      request.answeredAt === undefined ? '' : String(Math.floor(request.acceptedAt ?? 0)),
    ]);
    return parseHeartbeatReply(reply);
  }

  /**
   * Commits a target computed for `groupEpoch` (compare-and-set, validated against invariant 5 in
   * Redis) and answers with the member's reconciled heartbeat response. `commitResult` is NONE,
   * STALE_GROUP_EPOCH (nothing changed; the response may hand out the lease for the new epoch) or
   * INVALID_ASSIGNMENT (nothing changed).
   */
  async commitAssignment(
    member: Pick<HeartbeatRequest, 'streamPrefix' | 'consumerGroup' | 'memberId' | 'memberEpoch' | 'metadataVersion' | 'instanceId'>,
    groupEpoch: number,
    plan: AssignmentPlan,
  ): Promise<CommitResult> {
    const reply = await runScript(this.redis, 'commitAssignment', this.keys.groupKeys(member.streamPrefix, member.consumerGroup), [
      ...this.config,
      this.keys.groupWakeChannel(member.streamPrefix, member.consumerGroup),
      member.consumerGroup,
      member.memberId,
      String(member.memberEpoch),
      String(groupEpoch),
      encodePlan(plan),
      String(member.metadataVersion ?? 0),
      member.instanceId ?? '',
    ]);
    return parseCommitReply(reply);
  }

  /**
   * Ends the group's cutover of the resize that produced `metadataVersion`, after the caller checked
   * the shard streams (`cutoverProgress`). True when this call completed it; false when it was no
   * longer pending (completed by someone else, or replaced).
   */
  async completeCutover(streamPrefix: string, consumerGroup: string, metadataVersion: number): Promise<boolean> {
    const reply = (await runScript(this.redis, 'completeCutover', this.keys.groupKeys(streamPrefix, consumerGroup), [
      ...this.config,
      this.keys.groupWakeChannel(streamPrefix, consumerGroup),
      String(metadataVersion),
    ])) as unknown[];
    const code = errorCodeFromWire(reply[0]);
    if (code !== ErrorCode.NONE) throw toCoordinatorError(code, `group "${consumerGroup}": ${String(reply[1])}`);
    return Number(reply[2]) === 1;
  }
}

/** The commit script's target form: JSON { memberId: "ascending shard CSV" }, the stored form. */
function encodePlan(plan: AssignmentPlan): string {
  const encoded: Record<string, string> = {};
  for (const [memberId, shards] of Object.entries(plan)) encoded[memberId] = toShardCsv(shards);
  return JSON.stringify(encoded);
}

/** An observer is instrumentation: its failure must not fail the protocol step it watched. */
function notify(observe: (observation: HeartbeatObservation) => void, observation: HeartbeatObservation): void {
  try {
    observe(observation);
  } catch {
    // ignored on purpose (see CoordinatorOptions.onHeartbeat)
  }
}
