import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODE_BY_NUMBER, errorCodeFromWire } from './error-codes';
import { toCoordinatorError } from './errors';

describe('error codes', () => {
  it('the Lua mirror defines the same codes with the same numbers', () => {
    const lua = fs.readFileSync(path.join(__dirname, '../redis/lua/includes/errorCodes.lua'), 'utf8');
    const mirrored = [...lua.matchAll(/^local ERR_(\w+) = (\d+)$/gm)].map(([, name, value]) => [name, Number(value)]);
    expect(mirrored).toEqual(ERROR_CODE_BY_NUMBER.map((code, i) => [code, i]));
  });

  it('every code other than NONE maps to a typed error carrying the code and message', () => {
    for (const code of ERROR_CODE_BY_NUMBER.slice(1)) {
      const error = toCoordinatorError(code as Exclude<typeof code, 'NONE'>, 'why');
      expect(error.code).toBe(code);
      expect(error.message).toBe('why');
      expect(error.name).toMatch(/Error$/);
    }
  });

  it('an unknown wire code is an error, not a silent NONE', () => {
    expect(() => errorCodeFromWire(99)).toThrow(/unknown error code 99/);
  });
});
