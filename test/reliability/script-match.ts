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

/**
 * Matches a call of the scripts whose file name starts with `prefix`, as ioredis sends it: by its
 * digest (EVALSHA), or, the first time on a new connection, with its source (EVAL), whose header
 * starts with the file's name.
 */
export const scriptCall = (prefix: string) => {
  const bySha = evalsha(scriptShas(prefix));
  const isEval = TcpProxy.command('EVAL');
  const header = `\r\n--[[\n  ${prefix}`;
  return (request: string) => bySha(request) || (isEval(request) && request.includes(header));
};

/** The same for a command as a client hook sees it (command-hooks.ts): its name and arguments. */
export const isScriptCommand = (prefix: string) => {
  const shas = scriptShas(prefix);
  return (name: string, args: string[]) =>
    (name === 'evalsha' && shas.includes(args[0])) || (name === 'eval' && args[0].startsWith(`--[[\n  ${prefix}`));
};
