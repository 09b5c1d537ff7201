import { InvalidArgumentError } from 'commander';
import { OPTION_RANGES, type OptionRangeName } from '@redis-stream-coordinator/core';

/** Commander argument parsers that name what was wrong. An integer in the range of the option's row in OPTION_RANGES. */
export function integer(option: OptionRangeName) {
  const { min, max } = OPTION_RANGES[option];
  return (value: string): number => {
    const number = Number(value);
    if (!/^-?\d+$/.test(value) || number < min || number > max)
      throw new InvalidArgumentError(`expected an integer from ${min} to ${max}.`);
    return number;
  };
}

/** An ISO 8601 time (2026-11-30T10:00:00Z), or epoch milliseconds. */
export function datetime(value: string): number {
  const ms = /^\d+$/.test(value) ? Number(value) : Date.parse(value);
  if (!Number.isFinite(ms))
    throw new InvalidArgumentError('expected an ISO 8601 time such as 2026-11-30T10:00:00Z, or epoch milliseconds.');
  return ms;
}

export function streamId(value: string): string {
  if (!/^\d{1,20}(-\d{1,20})?$/.test(value)) throw new InvalidArgumentError('expected a stream id such as 1764505000000-0.');
  return value;
}
