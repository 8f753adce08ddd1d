// Time-indexed rows for the charts, bounded in time and in count so that a tab left open
// for a day holds the same memory as one opened a minute ago. Rows are keyed by time (unix
// seconds): a point received twice (live, then again in a backfill) merges into one row.

export class TimeRows {
  constructor({ windowS, maxRows }) {
    this.windowS = windowS;
    this.maxRows = maxRows;
    this.times = [];
    this.rows = new Map();
  }

  upsert(t, fields) {
    const row = this.rows.get(t);
    if (row) {
      Object.assign(row, fields);
      return;
    }
    this.rows.set(t, { ...fields });
    const last = this.times.length ? this.times[this.times.length - 1] : -Infinity;
    if (t > last) {
      this.times.push(t);
    } else {
      let low = 0;
      let high = this.times.length;
      while (low < high) {
        const mid = (low + high) >> 1;
        if (this.times[mid] < t) low = mid + 1;
        else high = mid;
      }
      this.times.splice(low, 0, t);
    }
    this.trim();
  }

  trim() {
    const newest = this.times.length ? this.times[this.times.length - 1] : 0;
    let drop = 0;
    while (drop < this.times.length && (this.times[drop] < newest - this.windowS || this.times.length - drop > this.maxRows)) {
      this.rows.delete(this.times[drop]);
      drop += 1;
    }
    if (drop) this.times.splice(0, drop);
  }

  get last() {
    return this.times.length ? this.rows.get(this.times[this.times.length - 1]) : null;
  }

  // uPlot's data: [times, column for each field], null where a row lacks the field.
  table(fields) {
    const columns = fields.map((field) => this.times.map((t) => {
      const value = this.rows.get(t)[field];
      return value === undefined ? null : value;
    }));
    return [this.times.slice(), ...columns];
  }
}

export function seconds(iso) {
  return Date.parse(iso) / 1000;
}

// Several series of [x, y] points on one x axis, as uPlot takes them: the union of their
// xs, sorted, and each series' values at its own xs, null at the others' (lines span them).
// A series with several points at one x (two decisions of one poll) keeps them all: that x
// is repeated as often as the series that has it most often needs.
export function aligned(seriesList) {
  const counts = new Map(); // x -> the most points any one series has there
  for (const points of seriesList) {
    const here = new Map();
    for (const [x] of points) here.set(x, (here.get(x) || 0) + 1);
    for (const [x, n] of here) counts.set(x, Math.max(n, counts.get(x) || 0));
  }
  const xs = [];
  const first = new Map(); // x -> its first row
  for (const x of [...counts.keys()].sort((a, b) => a - b)) {
    first.set(x, xs.length);
    for (let i = 0; i < counts.get(x); i++) xs.push(x);
  }
  const columns = seriesList.map((points) => {
    const column = new Array(xs.length).fill(null);
    const used = new Map();
    for (const [x, y] of points) {
      const nth = used.get(x) || 0;
      used.set(x, nth + 1);
      column[first.get(x) + nth] = y;
    }
    return column;
  });
  return [xs, ...columns];
}
