import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { KeyState } from '../../redis/shard-client';
import { type EntryOrigin, KeyOrderMirror, keyMayDefer, keyOrderVerdict, MIRRORED_KEY_STATES_MAX } from './key-order';

/** A key state, nothing counted and no barrier unless given. */
function aKeyState(state: Partial<KeyState> = {}): KeyState {
  return { field: 'kk', count: 0, due: 0, partial: false, floor: '', released: '', barrier: '', ...state };
}

describe('the key order verdict (parkFenced-5.lua)', () => {
  it('a key with nothing counted and nothing appended runs', () => {
    expect(keyOrderVerdict(undefined, '5-0', 'original')).toBe('run');
    expect(keyOrderVerdict(aKeyState(), '5-0', 'released')).toBe('run');
  });

  it('a key counting entries parks its later entries; a copy released in this cycle waits for the rest instead', () => {
    expect(keyOrderVerdict(aKeyState({ count: 1 }), '5-0', 'original')).toBe('park');
    expect(keyOrderVerdict(aKeyState({ count: 1 }), '5-0', 'released')).toBe('park');
    expect(keyOrderVerdict(aKeyState({ count: 1, floor: '4-0', released: '5-0', barrier: '5-0' }), '5-0', 'released')).toBe('hold');
    expect(keyOrderVerdict(aKeyState({ count: 1, partial: true, floor: '4-0', released: '5-0', barrier: '5-0' }), '9-0', 'original')).toBe(
      'hold',
    );
  });

  it('below the barrier an original is appended again; a copy appended again only below the last release', () => {
    const state = aKeyState({ floor: '7-0', released: '9-0', barrier: '11-0' });
    expect(keyOrderVerdict(state, '10-0', 'original')).toBe('reappend');
    expect(keyOrderVerdict(state, '12-0', 'original')).toBe('run');
    expect(keyOrderVerdict(state, '10-0', 'reappended')).toBe('run');
    expect(keyOrderVerdict(state, '8-0', 'reappended')).toBe('reappend');
  });

  it('a copy released before the cycle comes after it: appended again, or parked behind a waiting key', () => {
    expect(keyOrderVerdict(aKeyState({ floor: '7-0', released: '9-0', barrier: '9-0' }), '6-0', 'released')).toBe('reappend');
    expect(keyOrderVerdict(aKeyState({ floor: '7-0', released: '9-0', barrier: '9-0' }), '8-0', 'released')).toBe('run');
    expect(keyOrderVerdict(aKeyState({ count: 1, released: '9-0', barrier: '9-0' }), '8-0', 'released')).toBe('park');
  });

  it('a key may defer only while nothing of it is scheduled and nothing was appended again since its last release', () => {
    expect(keyMayDefer(undefined, '5-0')).toBe(true);
    expect(keyMayDefer(aKeyState({ released: '9-0', barrier: '9-0' }), '5-0')).toBe(true);
    expect(keyMayDefer(aKeyState({ count: 1 }), '5-0')).toBe(false);
    expect(keyMayDefer(aKeyState({ released: '9-0', barrier: '10-0' }), '9-0')).toBe(false);
    expect(keyMayDefer(aKeyState({ released: '9-0', barrier: '10-0' }), '10-0')).toBe(true);
  });

  it('the mirror says run only where the verdict does, and asks about keys it could not hold', () => {
    const mirror = new KeyOrderMirror([aKeyState({ field: 'ka', count: 1 })], true);
    expect(mirror.verdict('ka', '1-0', 'original')).toBe('ask');
    expect(mirror.verdict('kb', '1-0', 'original')).toBe('run');
    mirror.update(aKeyState({ field: 'ka', count: 0, floor: '3-0', released: '3-0', barrier: '3-0' }));
    expect(mirror.verdict('ka', '2-0', 'original')).toBe('ask');
    expect(mirror.verdict('ka', '4-0', 'original')).toBe('run');
    mirror.forget(['ka']);
    expect(mirror.size).toBe(0);
    const full = new KeyOrderMirror(
      Array.from({ length: MIRRORED_KEY_STATES_MAX }, (_, i) => aKeyState({ field: `k${i}`, count: 1 })),
      true,
    );
    full.update(aKeyState({ field: 'kmore', count: 1 }));
    expect(full.size).toBe(MIRRORED_KEY_STATES_MAX);
    expect(full.verdict('kother', '1-0', 'original')).toBe('ask');
  });
});

// ---- the model: one key, one shard, one group, one member (deferredOrder 'key') ---------------------

interface ModelEntry {
  id: string;
  seq: number;
  origin: EntryOrigin;
}

interface Scheduled {
  due: number;
  sid: number;
  entry: ModelEntry;
  parked: boolean;
}

/**
 * The scripts' transitions (deferFenced-5.lua, parkFenced-5.lua, releaseDue-8.lua) on one key and
 * the member's walk of its buffer, with reads, releases, clock ticks and dispatches in any order.
 */
class KeyOrderModel {
  now = 0;
  private nextId = 1;
  private sid = 0;
  readonly stream: ModelEntry[] = [];
  private delivered = 0;
  readonly buffer: ModelEntry[] = [];
  readonly schedule: Scheduled[] = [];
  state: KeyState = aKeyState();
  readonly handled: number[] = [];
  /** What each dispatch saw, when asked (a failing case, read). */
  trace: string[] | undefined;
  /** Retries run in place because the key counted entries (deferFenced-5.lua 'busy'). */
  busy = 0;
  private readonly failuresLeft: Map<number, number>;

  constructor(
    failures: number[],
    private readonly delays: number[],
  ) {
    this.failuresLeft = new Map(failures.map((f, seq) => [seq, f]));
  }

  write(seq: number): void {
    this.append({ id: '', seq, origin: 'original' });
  }

  read(count: number): void {
    while (count-- > 0 && this.delivered < this.stream.length) this.buffer.push(this.stream[this.delivered++]);
  }

  release(limit: number): void {
    const due = this.schedule
      .filter((s) => s.due <= this.now)
      .sort((a, b) => a.due - b.due || a.sid - b.sid)
      .slice(0, limit);
    for (const s of due) {
      this.schedule.splice(this.schedule.indexOf(s), 1);
      const copy = this.append({ id: '', seq: s.entry.seq, origin: 'released' });
      this.state.count -= 1;
      if (this.state.floor === '') this.state.floor = copy.id;
      this.state.released = copy.id;
      this.state.barrier = copy.id;
      if (this.state.count === 0) this.state.partial = false;
    }
    if (due.length >= limit && this.state.count > 0 && due.length > 0) this.state.partial = true;
  }

  /** The schedule in release order: due time, then schedule id (members of one score sort by id). */
  private inOrder(): Scheduled[] {
    return [...this.schedule].sort((a, b) => a.due - b.due || a.sid - b.sid);
  }

  /**
   * makeKeyDue (includes/keyOrder.lua): the key's entries due at `due`, when it is later than now,
   * made due now in their order, and the key's due time (what a later parked entry takes) now.
   */
  private makeKeyDue(due: number): number {
    let moved = 0;
    if (due > this.now) {
      for (const s of this.schedule) {
        if (s.due === due) {
          s.due = this.now;
          moved++;
        }
      }
    }
    if (this.state.count > 0 && this.state.due > this.now) this.state = { ...this.state, due: this.now };
    return moved;
  }

  /**
   * An operator's release of one entry by id (makeScheduledDue-3.lua): one not due yet is made due
   * now with its key's other entries of its due time (a deferral and its parked entries, in order).
   */
  makeDue(pick: number): void {
    const ordered = this.inOrder();
    const entry = ordered[pick % Math.max(1, ordered.length)];
    if (entry === undefined || entry.due <= this.now) return;
    this.makeKeyDue(entry.due);
  }

  /**
   * The testing kit's release of the next `limit` entries not due yet (makeScheduledDue-3.lua
   * without an id): made due now, and the rest of the last one's due time with them.
   */
  makeNextDue(limit: number): void {
    const later = this.inOrder().filter((s) => s.due > this.now);
    const slice = later.slice(0, limit);
    const lastDue = slice.length === limit ? slice[slice.length - 1]?.due : undefined;
    for (const s of later) if (slice.includes(s) || s.due === lastDue) s.due = this.now;
    if (slice.length > 0) this.makeKeyDue(0);
  }

  /**
   * An operator's drop of one entry by id (dropScheduled-3.lua): never released, counted out of its
   * key; a dropped deferral's parked entries waited only for it: made due now, in their order.
   * Returns the dropped entry's seq.
   */
  drop(pick: number): number | undefined {
    const ordered = this.inOrder();
    const entry = ordered[pick % Math.max(1, ordered.length)];
    if (entry === undefined) return undefined;
    this.schedule.splice(this.schedule.indexOf(entry), 1);
    const count = Math.max(0, this.state.count - 1);
    this.state = { ...this.state, count, partial: count === 0 ? false : this.state.partial };
    if (!entry.parked && count > 0) this.makeKeyDue(entry.due);
    return entry.entry.seq;
  }

  /** The buffer's first entry, as the member's dispatch walks it (one lane: one at a time). */
  dispatch(): void {
    const entry = this.buffer[0];
    if (!entry) return;
    const verdict = keyOrderVerdict(this.state, entry.id, entry.origin);
    this.trace?.push(
      `${this.now} ${entry.id} s${entry.seq} ${entry.origin}: ${verdict} ${JSON.stringify(this.state)} [${this.buffer.map((b) => b.id)}]`,
    );
    if (verdict === 'hold') return;
    this.buffer.shift();
    if (verdict === 'park') {
      this.schedule.push({ due: this.state.due, sid: ++this.sid, entry, parked: true });
      this.state = { ...this.state, count: this.state.count + 1 };
      return;
    }
    if (verdict === 'reappend') {
      const copy = this.append({ id: '', seq: entry.seq, origin: 'reappended' });
      this.state = { ...this.state, barrier: copy.id };
      return;
    }
    for (;;) {
      const left = this.failuresLeft.get(entry.seq) ?? 0;
      if (left === 0) {
        this.handled.push(entry.seq);
        return;
      }
      this.failuresLeft.set(entry.seq, left - 1);
      // deferFenced-5.lua: 'busy' (in place) while the key may have entries behind this one that a
      // later release would not come out before (keyMayDefer).
      if (!keyMayDefer(this.state, entry.id)) {
        this.busy += 1;
        continue;
      }
      const due = this.now + this.delays[(entry.seq + left) % this.delays.length];
      this.schedule.push({ due, sid: ++this.sid, entry, parked: false });
      this.state = { ...this.state, count: 1, due, floor: '', partial: false };
      return;
    }
  }

  private append(entry: ModelEntry): ModelEntry {
    const added = { ...entry, id: `${this.nextId++}-0` };
    this.stream.push(added);
    return added;
  }
}

type Step =
  | { kind: 'write' }
  | { kind: 'read'; count: number }
  | { kind: 'release'; limit: number }
  | { kind: 'tick'; ms: number }
  | { kind: 'dispatch' }
  | { kind: 'make-due'; pick: number }
  | { kind: 'make-next-due'; limit: number }
  | { kind: 'drop'; pick: number };

const aStep: fc.Arbitrary<Step> = fc.oneof(
  fc.constant<Step>({ kind: 'write' }),
  fc.integer({ min: 1, max: 4 }).map<Step>((count) => ({ kind: 'read', count })),
  fc.integer({ min: 1, max: 3 }).map<Step>((limit) => ({ kind: 'release', limit })),
  fc.integer({ min: 0, max: 30 }).map<Step>((ms) => ({ kind: 'tick', ms })),
  fc.constant<Step>({ kind: 'dispatch' }),
  fc.constant<Step>({ kind: 'dispatch' }),
  fc.nat(8).map<Step>((pick) => ({ kind: 'make-due', pick })),
  fc.integer({ min: 1, max: 3 }).map<Step>((limit) => ({ kind: 'make-next-due', limit })),
  fc.nat(8).map<Step>((pick) => ({ kind: 'drop', pick })),
);

describe('the key order model', () => {
  it('whatever the order of writes, reads, releases (of any bound), clock ticks, dispatches, and an operator making entries due now or dropping one, a key is handled in its order, each entry not dropped once', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 12, maxLength: 12 }),
        fc.array(fc.integer({ min: 0, max: 40 }), { minLength: 1, maxLength: 4 }),
        fc.array(aStep, { maxLength: 120 }),
        (failures, delays, steps) => {
          const model = new KeyOrderModel(failures, delays);
          model.trace = process.env.KEY_ORDER_TRACE ? [] : undefined;
          let written = 0;
          const dropped = new Set<number>();
          for (const step of steps) {
            if (step.kind === 'write') {
              if (written < failures.length) model.write(written++);
            } else if (step.kind === 'read') model.read(step.count);
            else if (step.kind === 'release') model.release(step.limit);
            else if (step.kind === 'tick') model.now += step.ms;
            else if (step.kind === 'make-due') model.makeDue(step.pick);
            else if (step.kind === 'make-next-due') model.makeNextDue(step.limit);
            else if (step.kind === 'drop') {
              const seq = model.drop(step.pick);
              if (seq !== undefined) dropped.add(seq);
            } else model.dispatch();
          }
          const expected = Array.from({ length: written }, (_, seq) => seq).filter((seq) => !dropped.has(seq));
          // Then drained: time goes on, everything is read, released and dispatched.
          for (let round = 0; round < 10_000 && model.handled.length < expected.length; round++) {
            model.now += 10;
            model.release(2);
            model.read(3);
            model.dispatch();
          }
          if (model.trace && model.handled.join() !== expected.join()) console.log(model.trace.join('\n'));
          expect(model.handled).toEqual(expected);
          expect(model.schedule).toEqual([]);
        },
      ),
      { numRuns: 5000 },
    );
  });
});
