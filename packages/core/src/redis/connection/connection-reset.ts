import type { Redis } from 'ioredis';
import type { RedisClient } from '../scripts';
import { isCluster } from './slot-pipelines';

/**
 * Resets a connection that stopped answering (a half-open socket: NAT or firewall state dropped, a
 * failover behind a virtual IP), so that ioredis reconnects at once instead of after minutes of TCP
 * retransmissions; says what it did, naming the connection `name` ('reader', 'command'). A live
 * socket is destroyed (not ended: a FIN may never be answered either). ioredis then reconnects and
 * sends the commands that were waiting for a reply again (`autoResendUnfulfilledCommands`), or fails
 * them, so each one still settles: nothing waits forever. Without a live socket (the old one is
 * gone and ioredis is already reconnecting: commands wait in its offline queue) the client is left
 * alone: `disconnect(true)` then would close the connector mid-way, and ioredis gives a client up
 * for good when its connector fails ("Connection is closed." from a Sentinel lookup under way,
 * status "end", no reconnect ever: seen in a Sentinel failover). A Cluster has no one socket: its
 * connections are reset.
 */
export function resetConnection(client: RedisClient, name: string): string {
  if (isCluster(client)) {
    client.disconnect(true);
    return `the ${name} connections were reset`;
  }
  const stream = client.stream as Redis['stream'] | undefined;
  if (stream && !stream.destroyed) {
    stream.destroy();
    return `the ${name} connection was reset`;
  }
  return `the ${name} connection is ${client.status}, left to reconnect`;
}

/**
 * Whether `client` leaves a connection that Redis answers READONLY (a master made a replica under
 * it) by itself: a Cluster client does (a demoted node answers a key's command with MOVED, which it
 * follows), a single-node client when it has a `reconnectOnError` (the application's own decides
 * what a READONLY does; `reconnectOnReadonly` reconnects). Otherwise only a reset moves it.
 */
export function leavesAReplicaByItself(client: RedisClient): boolean {
  return isCluster(client) || Boolean(client.options.reconnectOnError);
}
