/** What a member is doing now (`CoordinatedMember.stats()`): for health checks, dashboards and tests. */
export interface MemberStats {
  joined: boolean;
  /** Started and not stopped (it may still be joining). */
  running: boolean;
  /** `pause()` is in effect: nothing is fetched and no handler starts. */
  paused: boolean;
  runtimeMaxConcurrency: number;
  memberEpoch: number;
  ownedShards: number[];
  revokingShards: number[];
  activeHandlers: number;
  bufferedEntries: number;
  /**
   * The buffer budget this member shares with every member made from the same client
   * (`maxBufferedEntriesPerClient`): `entries` queued by all of them now, the most ever queued at
   * once (`peakEntries`), the budget (`cap`, the smallest any of them asked for), how many share it,
   * and the share each may always hold. Zeros while the member is not started.
   */
  clientBuffer: { entries: number; peakEntries: number; cap: number; members: number; share: number };
  heldEntries: number;
  metadataVersion: number;
  /**
   * What keeps this member from doing its work right now, one line each (a shard it cannot claim, a
   * dead letter it cannot write, a configuration it cannot recover from). Empty when all is well;
   * health checks report these.
   */
  problems: string[];
  /**
   * `deadLetter.onDeadLetter` calls that threw or rejected since the member was made (each also an
   * 'error' event). Their dead letters were written all the same.
   */
  deadLetterHookFailures: number;
  /**
   * ackMode 'manual': `message.ack()`/`nack()` calls refused since the member was made (each also
   * an 'ack-refused' event): after the shard was revoked or lost, after the entry was settled or
   * timed out, or refused by a newer owner's fencing token. Such entries run again.
   */
  refusedAcks: number;
}
