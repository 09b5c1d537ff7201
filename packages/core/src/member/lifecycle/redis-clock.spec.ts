import { describe, expect, it } from 'vitest';
import { RedisClockBound } from './redis-clock';

describe('RedisClockBound', () => {
  it('knows nothing before the first answer', () => {
    expect(new RedisClockBound().redisTimeAt(1000)).toBeUndefined();
  });

  it('keeps the bound of the fastest answer: a Redis time never later than the local moment', () => {
    // Redis time = local + 1,000,000 exactly; answers arrive 5 ms and 300 ms after their scripts ran.
    const clock = new RedisClockBound();
    clock.observe(1_000_100, 105);
    clock.observe(1_000_200, 500);
    expect(clock.redisTimeAt(2000)).toBe(1_001_995);
    clock.observe(1_000_600, 601);
    expect(clock.redisTimeAt(2000)).toBe(1_001_999);
  });

  it('follows a Redis clock set back once the better bound is a minute old', () => {
    const clock = new RedisClockBound();
    clock.observe(1_000_100, 100);
    clock.observe(900_200, 30_000); // set back by 100 s: worse, but the old bound is still fresh
    expect(clock.redisTimeAt(30_000)).toBe(1_030_000);
    clock.observe(900_200, 60_200); // the old bound is more than a minute old: replaced
    expect(clock.redisTimeAt(60_200)).toBe(900_200);
  });
});
