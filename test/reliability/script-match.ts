/** Matching one member's EVALSHA calls of given coordinator scripts, for the faults that fail or delay them. */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { loadScriptSource } from '../../packages/core/src/redis/scripts';
import { TcpProxy } from '../support/tcp-proxy';

const LUA_DIR = path.resolve(__dirname, '../../packages/core/src/redis/lua');

/** The EVALSHA digests of the scripts whose file name starts with one of `prefixes` (ioredis sends the sha). */
export function scriptShas(...prefixes: string[]): string[] {
  return fs
    .readdirSync(LUA_DIR)
    .filter((f) => f.endsWith('.lua') && prefixes.some((p) => f.startsWith(p)))
    .map((f) => createHash('sha1').update(loadScriptSource(f)).digest('hex'));
}

export const evalsha = (shas: string[]) => {
  const isEvalsha = TcpProxy.command('EVALSHA');
  return (request: string) => isEvalsha(request) && shas.some((sha) => request.includes(sha));
};
