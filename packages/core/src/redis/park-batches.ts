/**
 * The most parks one parkFenced-5.lua call carries (the script takes up to 256): a turn of a member
 * that read a few hundred entries of keys with deferrals asks about them in a few calls of this
 * size, each a few milliseconds of Redis time at most.
 */
export const PARKS_PER_CALL = 128;

/** One entry's question as parkFenced-5.lua takes it: id, key field, origin, packed fields. */
export type ParkArguments = [string, string, string, Buffer];

interface Ask {
  args: ParkArguments;
  resolve: (reply: unknown[] | null) => void;
  reject: (error: unknown) => void;
}

/**
 * Gathers the parks a member asks in one event-loop turn, per shard and grant, into parkFenced-5.lua
 * calls of up to PARKS_PER_CALL entries, sent at the end of the turn in the order they were asked
 * (one connection: Redis runs them in that order, so a key's entries are decided in their order).
 * Each ask resolves with its entry's own reply, null when the token was refused (the whole call:
 * nothing of it written), or rejects with the call's error (nothing answered: the caller asks again,
 * as it would have after a call of its own failed) or its entry's ('!': its write failed).
 */
export class ParkBatches {
  /** `<shardIndex> <grantEpoch>` -> the asks of this turn, in order. */
  private readonly asks = new Map<string, { shardIndex: number; grantEpoch: number; asks: Ask[] }>();
  private flush: NodeJS.Immediate | undefined;
  /** The flush an ask made now goes out with: asks of one turn have one, and Redis decides them in one go, in order. */
  turn = 0;

  constructor(private readonly send: (shardIndex: number, grantEpoch: number, args: (string | Buffer)[]) => Promise<unknown>) {}

  ask(shardIndex: number, grantEpoch: number, args: ParkArguments): Promise<unknown[] | null> {
    return new Promise((resolve, reject) => {
      const name = `${shardIndex} ${grantEpoch}`;
      let batch = this.asks.get(name);
      if (batch === undefined) {
        batch = { shardIndex, grantEpoch, asks: [] };
        this.asks.set(name, batch);
      }
      batch.asks.push({ args, resolve, reject });
      this.flush ??= setImmediate(() => this.sendAll());
    });
  }

  private sendAll(): void {
    this.flush = undefined;
    this.turn += 1;
    const batches = [...this.asks.values()];
    this.asks.clear();
    for (const { shardIndex, grantEpoch, asks } of batches) void this.sendInCalls(shardIndex, grantEpoch, asks);
  }

  /**
   * A shard's asks of one turn, PARKS_PER_CALL at a time, each call after the one before answered:
   * when one fails (for one of its entries or as a whole), the asks after it are not sent but told
   * its error, as the entries after a failed one in a call are, so that no entry is decided ahead
   * of one asked before it.
   */
  private async sendInCalls(shardIndex: number, grantEpoch: number, asks: Ask[]): Promise<void> {
    for (let i = 0; i < asks.length; i += PARKS_PER_CALL) {
      const failed = await this.sendCall(shardIndex, grantEpoch, asks.slice(i, i + PARKS_PER_CALL));
      if (failed === undefined) continue;
      for (const ask of asks.slice(i + PARKS_PER_CALL)) ask.reject(failed);
      return;
    }
  }

  /** One call: its asks answered; the error that stopped it part way or as a whole, if one did. */
  private async sendCall(shardIndex: number, grantEpoch: number, asks: Ask[]): Promise<unknown> {
    let reply: unknown;
    try {
      reply = await this.send(
        shardIndex,
        grantEpoch,
        asks.flatMap((ask) => ask.args),
      );
    } catch (error) {
      for (const ask of asks) ask.reject(error);
      return error;
    }
    if (!Array.isArray(reply)) {
      for (const ask of asks) ask.resolve(null);
      return undefined;
    }
    let failed: unknown;
    asks.forEach((ask, i) => {
      const answer = reply[i];
      if (!Array.isArray(answer)) failed ??= new Error(`parkFenced: no answer for entry ${ask.args[0]}`);
      else if (answer[0] === '!') failed ??= new Error(String(answer[1]));
      if (failed === undefined) ask.resolve(answer as unknown[]);
      else ask.reject(failed);
    });
    return failed;
  }
}
