import { afterEach, describe, expect, it, vi } from 'vitest';
import { MemberLease, staticTakeoverAfterMs } from './member-lease';

/** A lease renewed by a heartbeat sent at 0 ms, looked at `ms` later. */
function after(lease: MemberLease, ms: number): MemberLease {
  const now = vi.spyOn(performance, 'now');
  now.mockReturnValue(1000);
  lease.renewed(1000);
  now.mockReturnValue(1000 + ms);
  return lease;
}

describe('MemberLease', () => {
  afterEach(() => vi.restoreAllMocks());

  it('a plain member may start handlers until the session timeout less a margin, then the lease is spent', () => {
    expect(after(new MemberLease(15_000), 13_999).isSafe(true)).toBe(true);
    expect(after(new MemberLease(15_000), 14_000).isSafe(true)).toBe(false);
    expect(after(new MemberLease(15_000), 14_000).isSpent()).toBe(true);
  });

  it('a static member stops starting handlers before a new instance may take it over, and keeps its shards until the session budget', () => {
    const takeover = staticTakeoverAfterMs(3000, 15_000); // two heartbeat intervals
    expect(takeover).toBe(6000);
    expect(after(new MemberLease(15_000, takeover), 4999).isSafe(true)).toBe(true);
    expect(after(new MemberLease(15_000, takeover), 5000).isSafe(true)).toBe(false);
    expect(after(new MemberLease(15_000, takeover), 5000).isSpent()).toBe(false);
  });

  it('the takeover time follows the coordinator: the interval is capped at a third of the session timeout', () => {
    expect(staticTakeoverAfterMs(3000, 3000)).toBe(2000);
    expect(staticTakeoverAfterMs(100, 8000)).toBe(200);
  });
});
