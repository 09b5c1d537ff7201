import net from 'node:net';

/**
 * A loopback TCP proxy in front of a Redis server, for network faults: `freeze()` stops forwarding
 * in both directions (a partition, or a paused process: nothing is lost, it is delivered on
 * `thaw()`), `cut()` closes every connection (a crash or a reset).
 */
export class TcpProxy {
  private readonly server: net.Server;
  private readonly pairs = new Set<[net.Socket, net.Socket]>();
  private frozen = false;
  port = 0;

  private constructor(private readonly targetPort: number) {
    this.server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, '127.0.0.1');
      const pair: [net.Socket, net.Socket] = [client, upstream];
      this.pairs.add(pair);
      if (this.frozen) {
        client.pause();
        upstream.pause();
      } else {
        client.pipe(upstream);
        upstream.pipe(client);
      }
      const close = () => {
        client.destroy();
        upstream.destroy();
        this.pairs.delete(pair);
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
  }

  static async start(targetPort: number): Promise<TcpProxy> {
    const proxy = new TcpProxy(targetPort);
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    proxy.port = (proxy.server.address() as net.AddressInfo).port;
    return proxy;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  // pipe() resumes a paused source whenever the destination drains, so a freeze must unpipe.
  private pause([client, upstream]: [net.Socket, net.Socket]): void {
    client.unpipe(upstream);
    upstream.unpipe(client);
    client.pause();
    upstream.pause();
  }

  freeze(): void {
    this.frozen = true;
    for (const pair of this.pairs) this.pause(pair);
  }

  thaw(): void {
    this.frozen = false;
    for (const [client, upstream] of this.pairs) {
      client.pipe(upstream);
      upstream.pipe(client);
    }
  }

  cut(): void {
    for (const [client, upstream] of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
