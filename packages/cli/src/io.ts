/**
 * What one run of `rsc` writes to and reads from: the process's streams and environment for the
 * binary; a caller's for a run in-process (`runRsc`: the tests run most commands so, without a node
 * process each).
 */
export interface RscIo {
  stdout(text: string): void;
  stderr(text: string): void;
  /** The environment variables `rsc` reads (REDIS_URL, REDIS_CLUSTER_NODES, REDIS_PASSWORD, REDIS_USERNAME). */
  env: Readonly<Record<string, string | undefined>>;
}

export const PROCESS_IO: RscIo = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
  env: process.env,
};
