#!/usr/bin/env node
import { runRsc } from './program';

export { buildProgram, EXIT, runRsc } from './program';
export type { RscIo } from './io';

async function main(): Promise<void> {
  process.exitCode = await runRsc(process.argv.slice(2));
}

if (require.main === module) void main();
