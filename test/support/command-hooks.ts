import type { Redis } from 'ioredis';

/**
 * What to do with one command: `'send'` it, fail it with an `Error` (as a dropped connection would,
 * nothing reaches Redis), or a promise of either: the command waits for it, so a test can run
 * other commands (a resize, writes) between the steps of an admin operation.
 */
export type CommandVerdict = 'send' | Error;
export type CommandHook = (name: string, args: string[]) => CommandVerdict | Promise<CommandVerdict>;

/**
 * Puts `hook` in front of every single command the client sends (not pipelines): the way a test
 * makes one step of a multi-step operation fail or lets another command in before it.
 */
export function hookCommands(client: Redis, hook: CommandHook): void {
  type Command = Parameters<Redis['sendCommand']>[0] & { name: string; args: unknown[]; reject: (error: Error) => void };
  const send = client.sendCommand.bind(client);
  client.sendCommand = ((command: Command, stream?: unknown) => {
    const args = command.args.map((arg) => (Buffer.isBuffer(arg) ? arg.toString() : String(arg)));
    const verdict = hook(command.name, args);
    if (verdict === 'send') return send(command, stream as never);
    Promise.resolve(verdict).then(
      (decided) => {
        // The caller holds command.promise: the copy send() returns is not the one to report on.
        if (decided === 'send') (send(command, stream as never) as Promise<unknown>).catch(() => undefined);
        else command.reject(decided);
      },
      (error: Error) => command.reject(error),
    );
    return command.promise;
  }) as Redis['sendCommand'];
}

/** True for a script call (EVALSHA or EVAL) that gets `key` among its arguments. */
export function isScriptOn(name: string, args: string[], key: string): boolean {
  return (name === 'evalsha' || name === 'eval') && args.includes(key);
}

/**
 * A hook that fails the first `times` commands `matches` picks (as a lost connection would: nothing
 * reaches Redis) and sends every other; `failed()` says how many it failed.
 */
export function failing(matches: (name: string, args: string[]) => boolean, times = 1): CommandHook & { failed: () => number } {
  let failed = 0;
  const hook = (name: string, args: string[]): CommandVerdict => {
    if (failed >= times || !matches(name, args)) return 'send';
    failed++;
    return new Error('connection lost');
  };
  return Object.assign(hook, { failed: () => failed });
}
