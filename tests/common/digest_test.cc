// SHA-256 and HMAC-SHA256 against published test vectors (FIPS 180-2,
// RFC 4231), in one call and fed in pieces.
#include "common/digest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace scdino {
namespace {

TEST(Digest, Sha256MatchesTheStandardVectorsWholeAndInPieces) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(Sha256Hex(two_blocks), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 pieces;
  for (size_t i = 0; i < two_blocks.size(); i += 5) pieces.Update(two_blocks.data() + i, std::min<size_t>(5, two_blocks.size() - i));
  EXPECT_EQ(pieces.HexDigest(), Sha256Hex(two_blocks));
}

TEST(Digest, HmacSha256MatchesRfc4231) {
  // Test case 2: key "Jefe".
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_NE(HmacSha256Hex("Jefe", "what do ya want for nothing!"),
            HmacSha256Hex("Jefe", "what do ya want for nothing?"));
}

}  // namespace
}  // namespace scdino
