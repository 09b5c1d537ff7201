/**
 * An environment variable the CLI reads, undefined when it is unset or empty: `export
 * REDIS_CLUSTER_NODES=` (a blank line in an env file, a template left unfilled) means "not set",
 * not "a cluster of no nodes" or "an empty password". `from`: the variables of the run (RscIo.env).
 */
export function env(name: string, from: Readonly<Record<string, string | undefined>> = process.env): string | undefined {
  const value = from[name];
  return value === undefined || value.trim() === '' ? undefined : value;
}
