// The share form: a new share and priority for the run among the runs sharing its engines.
// The command is stored at once (the run's config changes with it) and shows as pending until
// the run's worker states it and answers with a share decision, or says why not.
import { errorWords } from "./api.js";
import { sendCommand } from "./engines.js";

export class SharePanel {
  constructor({ api, root }) {
    this.api = api;
    this.controls = root.querySelector("#share-controls");
    this.weight = root.querySelector("#share-weight");
    this.priority = root.querySelector("#share-priority");
    this.reason = root.querySelector("#share-reason");
    this.button = root.querySelector("#share-set");
    this.error = root.querySelector("#share-error");
    this.log = root.querySelector("#share-log");
    this.button.addEventListener("click", () => this.send());
  }

  disable() {
    this.controls.disabled = true;
  }

  fail(text) {
    this.error.hidden = false;
    this.error.textContent = text;
  }

  async send() {
    this.error.hidden = true;
    const share = Number.parseFloat(this.weight.value);
    const priority = Number(this.priority.value);
    if (!Number.isFinite(share) || share <= 0) return this.fail("Give a share: a weight above 0 (1 is the default).");
    if (!Number.isInteger(priority)) return this.fail("Give a priority: a whole number (0 is the default; higher is served first).");
    const what = `share ${share}, priority ${priority}`;
    this.button.disabled = true;
    this.button.classList.add("pending");
    try {
      await sendCommand(this.log, this.api.share, { share, priority, reason: this.reason.value.trim() }, what);
    } catch (error) {
      this.fail(`Share not changed: ${errorWords(error)}`);
    } finally {
      this.button.disabled = false;
      this.button.classList.remove("pending");
    }
    return undefined;
  }
}
