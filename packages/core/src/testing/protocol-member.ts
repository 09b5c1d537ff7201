import { type CoordinatorClient, ErrorCode, type HeartbeatRequest, type HeartbeatResponse, JOIN_EPOCH, LEAVE_EPOCH } from '../index';

/**
 * A well-behaved member at the protocol level, without reading streams: it applies each answer
 * (owns `assignedShards`, revokes `revokeShards` and acknowledges them on the next heartbeat) and
 * rejoins after UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH, as SPEC section 3 tells members to.
 */
export class ProtocolMember {
  memberEpoch = JOIN_EPOCH;
  owned: number[] = [];
  revoking: number[] = [];
  /** The stream metadata version of the last successful answer. */
  metadataVersion = 0;
  last: HeartbeatResponse | undefined;

  constructor(
    private readonly coordinator: CoordinatorClient,
    readonly streamPrefix: string,
    readonly consumerGroup: string,
    readonly memberId: string,
    readonly extra: Partial<HeartbeatRequest> = {},
  ) {}

  request(overrides: Partial<HeartbeatRequest> = {}): HeartbeatRequest {
    return {
      streamPrefix: this.streamPrefix,
      consumerGroup: this.consumerGroup,
      memberId: this.memberId,
      memberEpoch: this.memberEpoch,
      owned: this.owned,
      revoking: this.revoking,
      ackedRevocations: this.revoking,
      metadataVersion: this.metadataVersion,
      ...this.extra,
      ...overrides,
    };
  }

  /** One heartbeat that acknowledges every revocation in progress (the handlers are instant here). */
  async heartbeat(overrides: Partial<HeartbeatRequest> = {}): Promise<HeartbeatResponse> {
    return this.apply(await this.coordinator.heartbeat(this.request(overrides)));
  }

  /** Sends a request as is, without applying the answer: for hostile or stale requests. */
  async send(overrides: Partial<HeartbeatRequest>): Promise<HeartbeatResponse> {
    return this.coordinator.heartbeat(this.request(overrides));
  }

  join(): Promise<HeartbeatResponse> {
    this.reset();
    return this.heartbeat({ memberEpoch: JOIN_EPOCH, ackedRevocations: [] });
  }

  async leave(): Promise<HeartbeatResponse> {
    const response = await this.coordinator.heartbeat(this.request({ memberEpoch: LEAVE_EPOCH }));
    this.reset();
    return response;
  }

  private reset(): void {
    this.memberEpoch = JOIN_EPOCH;
    this.owned = [];
    this.revoking = [];
  }

  /** Applies an answer, also one obtained outside this object (heartbeatOnce, commitAssignment). */
  apply(response: HeartbeatResponse): HeartbeatResponse {
    this.last = response;
    if (response.errorCode === ErrorCode.UNKNOWN_MEMBER_ID || response.errorCode === ErrorCode.FENCED_MEMBER_EPOCH) {
      this.reset();
    } else if (response.errorCode === ErrorCode.NONE) {
      this.memberEpoch = response.memberEpoch;
      this.metadataVersion = response.metadataVersion;
      this.owned = response.assignedShards;
      this.revoking = response.revokeShards;
    }
    return response;
  }
}

/**
 * Heartbeats every member, round after round, until the group is STABLE and no member has anything
 * left to revoke or wait for; fails after `maxRounds` (a protocol that does not converge is a bug).
 */
export async function settle(members: ProtocolMember[], maxRounds = 20): Promise<HeartbeatResponse> {
  let last: HeartbeatResponse | undefined;
  for (let round = 0; round < maxRounds; round++) {
    for (const member of members) last = await member.heartbeat();
    const done = members.every((m) => m.last?.errorCode === ErrorCode.NONE && m.revoking.length === 0 && m.last.pendingShards.length === 0);
    if (done && last?.state === 'STABLE') return last;
  }
  throw new Error(`group did not converge in ${maxRounds} rounds; last state ${last?.state}`);
}
