/**
 * The checker's promises per member kind (member-kinds.ts): how much each kind did, and which of the
 * broken promises name one of its members (a run, an overlap, a stuck entry, a dead letter, a
 * duplicate). Every promise must hold for the run as a whole, so for each kind too; the report
 * shows that each kind carried its share of the work while they held.
 */
import type { DeadLetter, RecordLine, Run } from './records';

export interface KindReport {
  kind: string;
  /** Its member ids (a static member's instances share one). */
  members: string[];
  /** Its member processes (more than its members when a static member was restarted). */
  processes: number;
  /** Handler runs, and entries whose acknowledgement was accepted. */
  runs: number;
  acknowledged: number;
  deadLetters: number;
  /** The problem lines of the report that name one of its members. */
  problems: string[];
}

/** Whether `line` names member `id` (alone, or as a process of it: "p3-r7"), not another that starts alike ("p31"). */
function names(line: string, id: string): boolean {
  return new RegExp(`(^|[^\\w-])${id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}($|[^\\w])`).test(line);
}

export function reportPerKind(
  kinds: Map<string, string>,
  runs: Run[],
  lines: RecordLine[],
  deadLetters: DeadLetter[],
  problems: string[],
): KindReport[] {
  const byKind = new Map<string, string[]>();
  for (const [member, kind] of kinds) byKind.set(kind, [...(byKind.get(kind) ?? []), member]);
  return [...byKind.entries()].map(([kind, members]) => {
    const mine = new Set(members);
    const processes = new Set(runs.filter((r) => mine.has(r.member)).map((r) => r.process));
    let acknowledged = 0;
    for (const line of lines) if (line.e === 'ack' && line.ok && mine.has(line.m)) acknowledged += line.ids?.length ?? 0;
    return {
      kind,
      members,
      processes: Math.max(processes.size, members.length),
      runs: runs.filter((r) => mine.has(r.member)).length,
      acknowledged,
      deadLetters: deadLetters.filter((d) => mine.has(d.member)).length,
      problems: problems.filter((line) => members.some((id) => names(line, id))),
    };
  });
}
