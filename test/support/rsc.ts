import { execFile } from 'node:child_process';
import path from 'node:path';
import { runRsc } from '../../packages/cli/src/program';

/** What one run of `rsc` ended with. */
export interface RscRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** The built `rsc` binary (docs/operations.md, The `rsc` command): `npm test` builds it first. */
export const RSC_BIN = path.resolve(__dirname, '../../packages/cli/dist/main.js');

/**
 * Runs `rsc ...args` to completion in this process (runRsc: what the binary runs), with these
 * environment variables on top of the test's, its output collected. For tests of what a command
 * prints and its exit code: a node process per command would cost most of their time.
 */
export async function rscInProcess(args: string[], env: Record<string, string> = {}): Promise<RscRun> {
  const run = { stdout: '', stderr: '' };
  const code = await runRsc(args, {
    stdout: (text) => (run.stdout += text),
    stderr: (text) => (run.stderr += text),
    env: { ...process.env, ...env },
  });
  return { code, ...run };
}

/**
 * Runs the `rsc` binary with `args` to completion, with these environment variables on top of the
 * test's: for what only the process shows (its exit code, its environment).
 */
export function rscProcess(args: string[], env: Record<string, string> = {}): Promise<RscRun> {
  return new Promise((resolve) => {
    execFile(process.execPath, [RSC_BIN, ...args], { timeout: 20_000, env: { ...process.env, ...env } }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}
