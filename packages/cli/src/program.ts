import { Command, CommanderError, Option } from 'commander';
import { InvalidRequestError, StreamNotFoundError } from '@redis-stream-coordinator/core';
import { DEFAULT_URL, UsageError } from './connection';
import { PROCESS_IO, type RscIo } from './io';
import { redactUrl } from './redact';
import { registerDeadLetters } from './commands/dead-letters';
import { registerDescribe } from './commands/describe';
import { registerEvents } from './commands/events';
import { registerResetOffsets } from './commands/reset-offsets';
import { registerResize } from './commands/resize';
import { registerSchedule } from './commands/schedule';
import { registerInventory } from './commands/streams';
import { registerTrim } from './commands/trim';

const VERSION: string = require('../package.json').version;

/** Exit codes: 0 done, 1 the operation failed or was refused, 2 the command line was wrong. */
export const EXIT = { ok: 0, failed: 1, usage: 2 } as const;

/** The `rsc` command line, writing to `io` (Commander's own help and errors too). */
export function buildProgram(io: RscIo = PROCESS_IO): Command {
  const program = new Command('rsc')
    .description('Operate Redis Stream Coordinator streams and consumer groups')
    .version(VERSION)
    .addOption(new Option('--url <url>', `Redis URL (redis:// or rediss://; env REDIS_URL; default ${DEFAULT_URL})`))
    .addOption(
      new Option(
        '--cluster <nodes>',
        'Redis Cluster nodes instead of --url: comma-separated host:port or redis:// URLs (env REDIS_CLUSTER_NODES)',
      ),
    )
    .addOption(new Option('--password <password>', 'Redis password (env REDIS_PASSWORD)'))
    .addOption(new Option('--user <name>', 'Redis ACL user (env REDIS_USERNAME)'))
    .option('--tls', 'connect with TLS (implied by rediss://)')
    .option('--tls-ca <file>', 'CA certificate (PEM) to verify the server with')
    .option('--tls-insecure', 'do not verify the server certificate')
    .option('--key-prefix <prefix>', 'key prefix of the coordinator keys', 'rsc')
    .option('--json', 'print JSON for machines instead of tables')
    .showHelpAfterError('(rsc --help lists the commands and options)')
    // Commander's own messages quote what was typed: a URL in them is printed redacted too.
    .configureOutput({ writeOut: io.stdout, writeErr: io.stderr, outputError: (text, write) => write(redactUrl(text)) })
    .exitOverride();
  registerInventory(program, io);
  registerDescribe(program, io);
  registerEvents(program, io);
  registerResize(program, io);
  registerResetOffsets(program, io);
  registerDeadLetters(program, io);
  registerSchedule(program, io);
  registerTrim(program, io);
  for (const command of program.commands) command.exitOverride().showHelpAfterError(`(rsc ${command.name()} --help shows its options)`);
  return program;
}

/**
 * Runs `rsc` with `args` (what follows `rsc` on the command line) to completion and returns its
 * exit code (EXIT); every message, Commander's included, goes to `io`.
 */
export async function runRsc(args: readonly string[], io: RscIo = PROCESS_IO): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync([...args], { from: 'user' });
    return EXIT.ok;
  } catch (caught) {
    // A missing stream, told in what an operator can change here: the name and --key-prefix.
    const error =
      caught instanceof StreamNotFoundError
        ? new StreamNotFoundError(
            caught.streamPrefix,
            caught.context,
            `check the name and --key-prefix (\`rsc streams\` lists the streams under key prefix "${program.opts().keyPrefix}")`,
          )
        : caught;
    // Commander has printed the message; help and --version end well.
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    const usage = error instanceof UsageError || error instanceof InvalidRequestError || error instanceof RangeError;
    // Every message goes through the redaction: one that quotes a URL (ioredis', Commander's) hides its password too.
    io.stderr(`rsc: error: ${redactUrl((error as Error).message)}\n`);
    return usage ? EXIT.usage : EXIT.failed;
  }
}
