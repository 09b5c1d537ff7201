import { afterEach, describe, expect, it } from 'vitest';
import { env } from './environment';

describe('env: an empty environment variable counts as not set', () => {
  afterEach(() => {
    delete process.env.RSC_SPEC_VARIABLE;
  });
  it('unset, empty and blank are undefined; anything else is the value', () => {
    expect(env('RSC_SPEC_VARIABLE')).toBeUndefined();
    for (const blank of ['', ' ', '\t\n']) {
      process.env.RSC_SPEC_VARIABLE = blank;
      expect(env('RSC_SPEC_VARIABLE')).toBeUndefined();
    }
    process.env.RSC_SPEC_VARIABLE = 'redis://h:1';
    expect(env('RSC_SPEC_VARIABLE')).toBe('redis://h:1');
  });
});
