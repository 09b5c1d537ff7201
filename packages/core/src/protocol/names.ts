import { InvalidRequestError } from './errors';

/**
 * Names that become part of Redis keys. Colons are excluded so that no two names can build the same
 * key; braces would break the hash tag; whitespace and control characters have no business in keys.
 */
const NAME_PATTERN = /^[A-Za-z0-9._-]{1,100}$/;
const MEMBER_ID_PATTERN = /^[A-Za-z0-9._-]{1,128}$/;
const KEY_PREFIX_PATTERN = /^[A-Za-z0-9._:-]{1,64}$/;

function check(field: string, value: unknown, pattern: RegExp, rule: string): string {
  if (typeof value !== 'string' || !pattern.test(value)) {
    throw new InvalidRequestError(`${field} ${JSON.stringify(value)} is invalid: ${rule}`);
  }
  return value;
}

export function assertStreamPrefix(value: unknown, field = 'streamPrefix'): string {
  return check(field, value, NAME_PATTERN, 'use 1-100 characters of A-Z a-z 0-9 . _ -');
}

export function assertConsumerGroup(value: unknown, field = 'consumerGroup'): string {
  return check(field, value, NAME_PATTERN, 'use 1-100 characters of A-Z a-z 0-9 . _ -');
}

export function assertMemberId(value: unknown, field = 'memberId'): string {
  return check(field, value, MEMBER_ID_PATTERN, 'use 1-128 characters of A-Z a-z 0-9 . _ -');
}

export function assertKeyPrefix(value: unknown, field = 'keyPrefix'): string {
  return check(field, value, KEY_PREFIX_PATTERN, 'use 1-64 characters of A-Z a-z 0-9 . _ : -');
}

/** An integer option within a range, or a RangeError naming the option and the value. */
export function assertIntegerInRange(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${field} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`);
  }
  return value;
}
