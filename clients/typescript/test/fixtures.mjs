// The shared protocol vectors (Tests/Fixtures/protocol-vectors.json), also read by the Swift tests.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const vectorsPath = fileURLToPath(new URL("../../../Tests/Fixtures/protocol-vectors.json", import.meta.url));
export const vectors = JSON.parse(readFileSync(vectorsPath, "utf8"));
