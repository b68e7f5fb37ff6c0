import DeltaSnapClient
import DeltaSnapTestSupport
import DeltaSnapTrust
import Foundation
import Testing

extension SignedSyncTests {
    /// §8.4: an index with the sequence held (re-signed later, or an older copy replayed) can
    /// only move the held expiry forward.
    @Test func aReplayedIndexWithTheHeldSequenceNeitherShortensNorExtends() async throws {
        let setup = try await SignedSyncTests.Setup.make()
        defer { Task { await setup.finish() } }
        #expect(await setup.replica.sync().name == "full")
        let held = try #require(await setup.replica.currentState.indexExpires)
        let sequence = try #require(await setup.replica.currentState.indexSequence)
        let key = setup.key
        func resigned(expiresBy delta: Int64) -> @Sendable (URL, [UInt8]) -> [UInt8]? {
            { url, body in
                guard url.path.hasSuffix("/v1/index"), var index = try? SignedIndex.parse(body) else { return nil }
                index.issued += delta
                index.expires += delta
                return index.signed(with: [key]).document
            }
        }
        setup.mirror.rewrite = resigned(expiresBy: -3600)
        #expect(await setup.replica.sync() == .notModified)
        #expect(await setup.replica.currentState.indexExpires == held, "a replayed older copy shortened the expiry")
        #expect(await setup.replica.currentState.indexSequence == sequence)
        setup.mirror.rewrite = resigned(expiresBy: 3600)
        #expect(await setup.replica.sync() == .notModified)
        #expect(await setup.replica.currentState.indexExpires == held.addingTimeInterval(3600))
        // The older copy again, after the later one: still the later expiry.
        setup.mirror.rewrite = resigned(expiresBy: -3600)
        #expect(await setup.replica.sync() == .notModified)
        #expect(await setup.replica.currentState.indexExpires == held.addingTimeInterval(3600))
    }
}
