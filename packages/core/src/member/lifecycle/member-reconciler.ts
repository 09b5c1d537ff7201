import type { EventEmitter } from 'node:events';
import { type HeartbeatResponse, JOIN_EPOCH } from '../../protocol/heartbeat';
import { sleep } from '../abortable-sleep';
import type { MemberEvents } from '../member-events';
import type { MemberLease } from './member-lease';
import type { ShardPoller } from '../shard-poller';

/**
 * A member's ownership and how each heartbeat answer changes it (SPEC 5, the client side of
 * Kafka's CurrentAssignmentBuilder): the member epoch, the shards owned (with the epoch each was
 * granted at), those being revoked and those whose revocation finished but is not yet acknowledged.
 * Revoke before assign: a revoked shard is released (its in-flight work finished or timed out)
 * before it is reported, and only a report lets the coordinator give it to the next owner. Owned
 * shards are only as good as the member's lease, so the lease checks live here too.
 */
export class MemberReconciler {
  private epoch = JOIN_EPOCH;
  /** shardIndex -> the epoch it was granted at (its fencing token). */
  private readonly owned = new Map<number, number>();
  private readonly revoking = new Set<number>();
  private readonly revoked = new Set<number>();

  constructor(
    private readonly poller: ShardPoller,
    private readonly events: EventEmitter<MemberEvents>,
    private readonly lease: MemberLease,
    private readonly options: { readonly revocationTimeoutMs: number },
    /** Reports a change of ownership to the coordinator at once. */
    private readonly requestHeartbeat: () => void,
    /** While stop() drains: resolves when its drain ended (handlers finished or shutdownTimeoutMs passed). */
    private readonly drained: () => Promise<void> | undefined,
  ) {}

  get memberEpoch(): number {
    return this.epoch;
  }

  /** The shards this member reads now, in order. */
  ownedShards(): number[] {
    return [...this.owned.keys()].sort((a, b) => a - b);
  }

  get ownedCount(): number {
    return this.owned.size;
  }

  /** The shards being revoked now, in order. */
  revokingShards(): number[] {
    return [...this.revoking].sort((a, b) => a - b);
  }

  /** What the next heartbeat reports: owned shards, revocations under way, and finished ones. */
  report(): { owned: number[]; revoking: number[]; ackedRevocations: number[] } {
    return { owned: this.ownedShards(), revoking: [...this.revoking], ackedRevocations: [...this.revoked] };
  }

  /** Shards owned or being revoked: what a lost lease or a lost group takes away. */
  holdsShards(): boolean {
    return this.owned.size > 0 || this.revoking.size > 0;
  }

  /** Anything the coordinator may no longer agree with: shards, unacknowledged revocations, an epoch. */
  holdsAnything(): boolean {
    return this.holdsShards() || this.revoked.size > 0 || this.epoch !== JOIN_EPOCH;
  }

  /** An accepted heartbeat reported these finished revocations: the coordinator has them now. */
  revocationsAcknowledged(shards: number[]): void {
    for (const shard of shards) this.revoked.delete(shard);
  }

  /** `takeNewShards` false: apply revocations and losses only (metadata not synced, or stopping). */
  apply(response: HeartbeatResponse, takeNewShards: boolean): void {
    this.epoch = response.memberEpoch;
    const assigned = new Set(response.assignedShards);
    const toRevoke = new Set(response.revokeShards);

    const revokedNow: number[] = [];
    for (const shard of toRevoke) {
      if (this.owned.has(shard)) {
        this.owned.delete(shard);
        this.revoking.add(shard);
        revokedNow.push(shard);
      } else if (!this.revoking.has(shard)) {
        // Finished earlier, but the answer to the heartbeat that reported it was lost: report again.
        this.revoked.add(shard);
      }
    }
    // A shard the coordinator no longer counts as ours at all (e.g. after a rejoin): stop at once.
    for (const shard of [...this.owned.keys()]) {
      if (!assigned.has(shard) && !toRevoke.has(shard)) {
        this.owned.delete(shard);
        void this.poller.releaseShard(shard, 0, 'shard-lost');
      }
    }
    if (revokedNow.length > 0) void this.revoke(revokedNow, response.memberEpoch);

    const gained: number[] = [];
    // Not taken now, still granted: the next heartbeat's answer offers them again.
    if (!takeNewShards) assigned.clear();
    // Owned here and still granted, but given up by the poller (a fenced call was refused): claimed
    // again, so the shard is never left owned but unread; the claim says who holds it meanwhile.
    for (const [shard, grantEpoch] of this.owned) {
      if (assigned.has(shard)) this.poller.addShard(shard, grantEpoch);
    }
    for (const shard of assigned) {
      if (!this.owned.has(shard) && !this.revoking.has(shard)) {
        this.owned.set(shard, response.memberEpoch);
        this.poller.addShard(shard, response.memberEpoch);
        gained.push(shard);
      }
    }
    if (gained.length > 0) {
      this.events.emit('assigned', { shards: gained.sort((a, b) => a - b), memberEpoch: response.memberEpoch });
      this.requestHeartbeat(); // report the new ownership (and the new activeConsumerWorkers) at once
    }
  }

  /** Revoke-before-assign: stop, let in-flight work finish (bounded), acknowledge, then report at once. */
  private async revoke(shards: number[], memberEpoch: number): Promise<void> {
    await Promise.all(shards.map((shard) => this.poller.releaseShard(shard, this.options.revocationTimeoutMs)));
    // While stopping, the poller already released every shard, so it cannot wait for the shard's
    // handler: wait for the drain instead, bounded as a revocation is.
    const drained = this.drained();
    if (drained) await Promise.race([drained, sleep(this.options.revocationTimeoutMs)]);
    for (const shard of shards) {
      if (this.revoking.delete(shard)) this.revoked.add(shard);
    }
    this.events.emit('revoked', { shards: [...shards].sort((a, b) => a - b), memberEpoch });
    this.requestHeartbeat();
  }

  /** Local ownership is no longer valid: stop reading and acking, clear everything, rejoin with epoch 0. */
  dropEverything(): void {
    this.poller.dropAll();
    this.forget();
  }

  /**
   * Forgets the ownership without telling the poller: for a member started again (its poller
   * stopped and released everything with the last stop()).
   */
  forget(): void {
    this.owned.clear();
    this.revoking.clear();
    this.revoked.clear();
    this.epoch = JOIN_EPOCH;
  }

  /** The member left the group: it owns nothing (the poller released every shard while stopping). */
  left(): void {
    this.owned.clear();
  }

  // ---- lease ---------------------------------------------------------------------------------------

  leaseIsSafe(): boolean {
    return this.lease.isSafe(this.owned.size > 0);
  }

  /**
   * An accepted heartbeat sent at `sentAt`. If handlers were held back meanwhile (a static member's
   * start budget is short), the poller is told at once rather than at its next idle wake-up.
   */
  leaseRenewed(sentAt: number): void {
    const wasSafe = this.leaseIsSafe();
    this.lease.renewed(sentAt);
    if (!wasSafe && this.leaseIsSafe()) this.poller.handlersMayStart();
  }

  /** No heartbeat got through for the lease budget: stop before the shards can be given away. */
  checkLease(): void {
    if (!this.holdsShards()) return;
    if (!this.lease.isSpent()) return;
    this.events.emit('lease-lost', {
      shards: this.ownedShards(),
      memberEpoch: this.epoch,
      sinceLastHeartbeatMs: Math.round(this.lease.sinceRenewedMs()),
    });
    this.dropEverything();
  }
}
