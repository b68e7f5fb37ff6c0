import DeltaSnapServer
import Foundation
import Logging

extension ServeCommand {
    /// The identity providers' key sets (fetched now: a bad URL or set ends the start with
    /// one line), the issuer and audience checks and where the claims are.
    func configureIdentityProviders(_ access: inout AccessPolicy, logger: Logger) async throws {
        access.issuers = jwtIssuer
        access.audiences = jwtAudience
        access.claims.subject = ClaimPath(subjectClaim)
        access.claims.roles = ClaimPath(rolesClaim)
        access.claims.read = ClaimPath(readClaim)
        access.claims.write = ClaimPath(writeClaim)
        access.tokenLogger = logger
        var keySets: [JWKSKeySource] = []
        for text in jwksUrl {
            keySets.append(try await JWKSKeySource(url: text, logger: logger))
        }
        for path in jwksFile {
            keySets.append(try await JWKSKeySource(file: path, logger: logger))
        }
        access.keySets = keySets
        for keySet in keySets {
            printError("deltasnap: key set \(keySet.location): kids \(keySet.keyIdentifiers.sorted().joined(separator: ", "))")
        }
    }
}
