/// The sequence number a signed index carries: it must never go down for what clients see as
/// one publication, even when the data owner rebuilds the store from scratch (a new epoch).
///
/// Each commit takes `max(previous + 1, commit time in microseconds)`: a store rebuilt later
/// starts above anything the old one issued (unless the old one averaged more than a million
/// commits a second), and several `serve` processes on one store read the same number.
package enum PublicationSequence {
    package static func next(after previous: UInt64, at seconds: Int64) -> UInt64 {
        max(previous &+ 1, UInt64(max(0, seconds)) &* 1_000_000)
    }
}
