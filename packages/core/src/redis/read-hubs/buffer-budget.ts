/**
 * The buffer budget of one read hub: every member made from one client reads through that client's
 * hub (ReadHub, ClusterReadHub) and buffers what it reads out of one budget of entries,
 * `maxBufferedEntriesPerClient`, so 64 members in a process hold what one member may, not 64 times
 * as much (docs/runtime.md, One buffer budget per client).
 *
 * - Each member may hold its **share**: the budget over the members (at least 1, so that no member
 *   starves however many share it; at most its own `maxBufferedEntries`), whatever the others hold.
 * - Beyond its share, a member may use what the others do not hold and are not promised: a member
 *   alone on its client may fill the whole budget, and one whose handler hangs with its queue full
 *   holds at most the budget less the others' shares.
 * - A member's use is its queued entries (what `maxBufferedEntries` counts: read, not yet taken by a
 *   handler) plus what the reads it has out asked for (`reserve`, given back when their replies are
 *   queued): a read never asks for more than the room, so what comes back always fits.
 *
 * The budget only decides what a read asks for (its COUNT, which shards it covers): an entry that
 * was read is never dropped for it. So the cap holds while the same members share it (the sum over
 * them of max(use, share) never passes it). When a member joins, the others' shares shrink: they read
 * nothing until they are back within them, while the newcomer may read its share at once (it must
 * not starve behind a member whose handler hangs), so for that while the hub holds at most the cap
 * and the newcomers' shares. With more members than the budget, each still holds one entry at least.
 * The budget's size is the smallest any of its members asked for.
 */
export class BufferBudget {
  private readonly shares = new Set<BufferShare>();
  private cap = 0;
  private share = 0;
  /** Over the shares: max(use, share), what each holds or is promised. */
  private promised = 0;
  /** Entries queued over the shares now, and the most ever queued at once (stats().clientBuffer). */
  private queued = 0;
  private peakQueued = 0;
  /** Members waiting for room, with how much they wait for: told when it is there (see `waitForRoom`). */
  private readonly waiting = new Map<BufferShare, number>();

  /**
   * A member starts reading through the hub: it asks for a budget of `cap` entries and holds at
   * most `ownMax` itself; `onRoom` wakes it when room it waits for frees up (another member's
   * handler took entries, a shard was released). Returns its share; `leave` ends it.
   */
  join(cap: number, ownMax: number, onRoom: () => void): BufferShare {
    const share = new BufferShare(this, cap, ownMax, onRoom);
    this.shares.add(share);
    this.resize();
    return share;
  }

  /** What the members sharing the budget can see of it (`stats().clientBuffer`). */
  describe(): { entries: number; peakEntries: number; cap: number; members: number; share: number } {
    return { entries: this.queued, peakEntries: this.peakQueued, cap: this.cap, members: this.shares.size, share: this.share };
  }

  /** @internal */
  leave(share: BufferShare): void {
    if (!this.shares.delete(share)) return;
    this.waiting.delete(share);
    this.resize();
    this.tellWaiting();
  }

  /** @internal The room of `share`: what a read of its may ask for now (never negative). */
  roomOf(share: BufferShare): number {
    if (!this.shares.has(share)) return Math.max(0, share.ownMax - share.used);
    const own = this.shareOf(share);
    const othersPromised = this.promised - Math.max(share.used, own);
    // Its share always; beyond it, what the others neither hold nor are promised.
    return Math.max(0, Math.min(share.ownMax - share.used, Math.max(own - share.used, this.cap - othersPromised - share.used)));
  }

  /** @internal `share`'s queued entries changed by `queued`, its reservations by `reserved`. */
  changed(share: BufferShare, queued: number, reserved: number): void {
    if (!this.shares.has(share)) return;
    const own = this.shareOf(share);
    const before = share.used - queued - reserved;
    this.promised += Math.max(share.used, own) - Math.max(before, own);
    this.queued += queued;
    if (this.queued > this.peakQueued) this.peakQueued = this.queued;
    if (queued + reserved < 0) this.tellWaiting();
  }

  /** @internal Wake `share` when its room reaches `room` (0: it waits for nothing). */
  waitForRoom(share: BufferShare, room: number): void {
    if (room <= 0 || !this.shares.has(share)) this.waiting.delete(share);
    else this.waiting.set(share, room);
  }

  private tellWaiting(): void {
    if (this.waiting.size === 0) return;
    for (const [share, room] of this.waiting) {
      if (this.roomOf(share) < room) continue;
      this.waiting.delete(share);
      share.onRoom();
    }
  }

  private shareOf(share: BufferShare): number {
    return Math.min(this.share, share.ownMax);
  }

  /** A member came or went: the cap (the smallest asked for), each one's share, and what is promised. */
  private resize(): void {
    let cap = Number.POSITIVE_INFINITY;
    for (const share of this.shares) cap = Math.min(cap, share.cap);
    this.cap = this.shares.size === 0 ? 0 : cap;
    this.share = this.shares.size === 0 ? 0 : Math.max(1, Math.floor(this.cap / this.shares.size));
    this.promised = 0;
    this.queued = 0;
    for (const share of this.shares) {
      this.promised += Math.max(share.used, this.shareOf(share));
      this.queued += share.queued;
    }
  }
}

/**
 * One member's part of its hub's BufferBudget: the ShardSet counts its queued entries here, and the
 * reader reserves what each read (or takeover page) asks for until its reply is queued.
 */
export class BufferShare {
  queued = 0;
  reserved = 0;

  /** @internal */
  constructor(
    private readonly budget: BufferBudget,
    readonly cap: number,
    readonly ownMax: number,
    readonly onRoom: () => void,
  ) {}

  get used(): number {
    return this.queued + this.reserved;
  }

  /** What a read may ask for now. */
  room(): number {
    return this.budget.roomOf(this);
  }

  /** The most this member may hold now: what it holds and its room. */
  size(): number {
    return this.used + this.room();
  }

  /** Entries joined the member's queues (`count` > 0) or left them: a handler took them, a shard was released. */
  count(count: number): void {
    if (count === 0) return;
    this.queued += count;
    this.budget.changed(this, count, 0);
  }

  /**
   * Holds `count` entries of room while a read that may bring them is out: no other member's read
   * takes that room meanwhile. Returns the release (idempotent), called once the reply is queued or
   * the read failed.
   */
  reserve(count: number): () => void {
    if (count <= 0) return () => undefined;
    this.reserved += count;
    this.budget.changed(this, 0, count);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.reserved -= count;
      this.budget.changed(this, 0, -count);
    };
  }

  /** Wake the member (`onRoom`) once its room reaches `room`; 0 cancels. */
  waitForRoom(room: number): void {
    this.budget.waitForRoom(this, room);
  }

  /** The member stopped reading through the hub: its use no longer counts. */
  leave(): void {
    this.budget.leave(this);
  }
}
