// A header for the test of api_reference: one public name with a comment, one without, one in detail.
#pragma once
namespace attnx {
// Documented: has this comment.
inline constexpr int documented = 1;

inline constexpr int undocumented_name = 2;
namespace detail {
inline constexpr int hidden = 3;
}
}  // namespace attnx
