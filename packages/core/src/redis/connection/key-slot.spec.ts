import { describe, expect, it } from 'vitest';
import { keySlot } from './key-slot';

describe('keySlot', () => {
  it('matches CLUSTER KEYSLOT of redis-server 7: plain keys, hash tags, empty and nested braces, UTF-8', () => {
    const expected: [string, number][] = [
      ['foo', 12182],
      ['123456789', 12739],
      ['{user1000}.following', 3443],
      ['foo{}{bar}', 8363],
      ['foo{{bar}}zap', 4015],
      ['foo{bar}{zap}', 5061],
      ['{héllo}x', 11061],
      ['rsc:{orders}:s:3', 105],
    ];
    for (const [key, slot] of expected) expect(keySlot(key), key).toBe(slot);
  });
});
