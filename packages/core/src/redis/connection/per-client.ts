/**
 * One instance per base client, made on first use and dropped with the client (a WeakMap): the
 * hubs that let every member made from one client share its connections (WakeHub, ShardWakeHub,
 * ReadHub) are found through this.
 */
export function perClient<C extends object, H>(create: (base: C) => H): (base: C) => H {
  const made = new WeakMap<C, H>();
  return (base) => {
    let hub = made.get(base);
    if (hub === undefined) {
      hub = create(base);
      made.set(base, hub);
    }
    return hub;
  };
}
