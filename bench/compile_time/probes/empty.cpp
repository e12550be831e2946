// The baseline: what the compiler costs for a program that includes a standard header and nothing of attnx.
#include <vector>
int main() {
  std::vector<int> v(3);
  return v[1];
}
