/**
 * An environment variable the CLI reads, undefined when it is unset or empty: `export
 * REDIS_CLUSTER_NODES=` (a blank line in an env file, a template left unfilled) means "not set",
 * not "a cluster of no nodes" or "an empty password".
 */
export function env(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value.trim() === '' ? undefined : value;
}
