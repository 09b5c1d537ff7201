#!/usr/bin/env node
import { runRsc } from './program';

export { buildProgram, EXIT, runRsc } from './program';
export type { RscIo } from './io';

/** Runs the command line of this process (`bin/rsc.js` calls it); the exit code goes into `process.exitCode`. */
export async function main(): Promise<void> {
  process.exitCode = await runRsc(process.argv.slice(2));
}

if (require.main === module) void main();
